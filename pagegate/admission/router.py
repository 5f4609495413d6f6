"""Several servers behind one admission: send each page to the least-loaded one in rotation.

One gate (or fixed limit) per server keeps that server saturated but not overloaded; the
router only chooses which server a page queues for. The choice and the rotation rules
are pure functions (routing.py); `Router` is the thin runtime that implements the
`Admission` protocol and hands out `RoutedPermit`s naming the server the page goes to.
It reads each backend through `Admission.signals`, so any admission can be a backend.

A server leaves rotation when its admission pauses (a gate whose /metrics scrapes fail
or go stale, or whose server reports itself unhealthy or stalled) or when `refuse_limit`
requests in a row come back as capacity errors (connection refused, 503...). It comes
back once its admission has a reading newer than the refusal (or, for a backend without
readings, after `probation_seconds`). Pages queued at a server that leaves rotation are
taken back and routed again; pages that were in flight on it fail with a capacity error,
which PageOcr retries through the router without spending a page attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from types import TracebackType
from typing import Any

from pagegate.admission.base import (
    Admission,
    AdmissionSignals,
    Outcome,
    Permit,
    outcome_for_exception,
)
from pagegate.admission.routing import (
    ServerHealth,
    ServerLoad,
    after_outcome,
    choose_server,
    in_rotation,
)
from pagegate.admission.timing import wait_for_event
from pagegate.clock import Clock, MonotonicClock
from pagegate.errors import GateClosedError, ServerUnavailableError

log = logging.getLogger("pagegate.router")


class RoutedPermit:
    """A server's permit, plus which server the page must be sent to.

    Anything else asked of it goes to the server's own permit, so whatever the gate's
    permit offers is offered here too.
    """

    def __init__(self, server_url: str, inner: Permit) -> None:
        self.server_url = server_url
        self.outcome: Outcome | None = None
        self._inner = inner

    def finish(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self._inner.finish(outcome)

    def sent(self) -> None:
        self._inner.sent()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Backend:
    def __init__(self, url: str, admission: Admission) -> None:
        self.url = url
        self.admission = admission
        self.health = ServerHealth()
        self.rotating = False
        self.left = asyncio.Event()   # set when the server leaves rotation
        self.assigned = 0
        self.routed = 0               # pages admitted to it over the run
        self.answered = 0             # of those, answered (OK or CONTENT)
        self.rerouted = 0             # waits taken back because it left rotation
        self.left_at: float | None = None  # out of rotation with pages still assigned

    def capacity(self, now: float) -> int:
        """Its admission's limit, at least 1 (1 for one without a limit)."""
        return max(1, self.admission.signals(now).limit or 1)


class Router:
    """Routes page permits over several servers; implements the `Admission` protocol.

        async with Router([(url_a, gate_a), (url_b, gate_b)], clock=clock) as router:
            async with router.slot(group_id) as permit:   # a RoutedPermit
                send to permit.server_url ...

    The backends must already be running (entered gates); the router does not own them.
    Must be created inside the event loop that uses it.
    """

    def __init__(
        self,
        backends: Sequence[tuple[str, Admission]],
        *,
        clock: Clock | None = None,
        unavailable_after_seconds: float | None = None,
        refuse_limit: int = 2,
        probation_seconds: float = 5.0,
        check_interval_seconds: float = 0.2,
    ) -> None:
        if not backends:
            raise ValueError("a router needs at least one server")
        if refuse_limit < 1:
            raise ValueError("refuse_limit must be at least 1")
        asyncio.get_running_loop()
        self._backends = [_Backend(url, admission) for url, admission in backends]
        self._clock: Clock = clock or MonotonicClock()
        self._unavailable_after = unavailable_after_seconds
        self._refuse_limit = refuse_limit
        self._probation = probation_seconds
        self._interval = check_interval_seconds
        self._changed = asyncio.Event()  # set when some server enters rotation
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._refresh()

    @property
    def urls(self) -> list[str]:
        return [b.url for b in self._backends]

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._watch_forever(), name="pagegate-router")

    async def aclose(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._changed.set()

    async def __aenter__(self) -> Router:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _watch_forever(self) -> None:
        while True:
            self._refresh()
            await self._clock.sleep(self._interval)

    def _refresh(self) -> None:
        """Recompute who is in rotation; wake the pages that the change concerns."""
        now = self._clock.now()
        for backend in self._backends:
            signals = backend.admission.signals(now)
            paused = signals.paused is not None
            rotating = in_rotation(backend.health, paused=paused, reading_at=signals.reading_at,
                                   now=now, probation_seconds=self._probation)
            if rotating == backend.rotating:
                continue
            backend.rotating = rotating
            if rotating:
                backend.left = asyncio.Event()
                self._changed.set()
                log.info("server %s in rotation", backend.url)
            else:
                backend.left.set()
                backend.left_at = now if backend.assigned else None
                log.warning("server %s out of rotation (%s); %d page(s) on it go elsewhere",
                            backend.url,
                            "gate paused" if paused else f"{backend.health.refusals} refusals",
                            backend.assigned)

    def _release(self, backend: _Backend) -> None:
        """A page no longer waits at or runs on `backend`; note when a dead one is empty."""
        backend.assigned -= 1
        if backend.assigned == 0 and backend.left_at is not None and not backend.rotating:
            log.warning("server %s drained %.2f s after it left rotation", backend.url,
                        self._clock.now() - backend.left_at)
            backend.left_at = None

    # ------------------------------------------------------------------ admission

    def slot(self, group_id: str) -> AbstractAsyncContextManager[Permit]:
        return self._slot(group_id)

    @asynccontextmanager
    async def _slot(self, group_id: str) -> AsyncIterator[Permit]:
        backend, inner_cm, inner = await self._admit(group_id)
        permit = RoutedPermit(backend.url, inner)
        error: BaseException | None = None
        try:
            yield permit
        except BaseException as exc:
            error = exc
            raise
        finally:
            outcome = permit.outcome or outcome_for_exception(error)
            if outcome.server_finished:
                backend.answered += 1
            backend.health = after_outcome(backend.health, outcome, self._clock.now(),
                                           self._refuse_limit)
            self._refresh()
            self._release(backend)
            if error is None:
                await inner_cm.__aexit__(None, None, None)
            else:
                await inner_cm.__aexit__(type(error), error, error.__traceback__)

    async def _admit(
        self, group_id: str
    ) -> tuple[_Backend, AbstractAsyncContextManager[Permit], Permit]:
        """Queue at the least-loaded server in rotation; start over if it leaves rotation."""
        waiting_since = self._clock.now()
        while True:
            if self._closed:
                raise GateClosedError("router is closed")
            self._refresh()
            index = choose_server(self._loads())
            if index is None:
                await self._wait_for_rotation(waiting_since)
                continue
            backend = self._backends[index]
            backend.assigned += 1
            admitted = await self._queue_at(backend, group_id)
            if admitted is not None:
                backend.routed += 1
                return backend, admitted[0], admitted[1]
            backend.rerouted += 1
            self._release(backend)

    async def _queue_at(
        self, backend: _Backend, group_id: str
    ) -> tuple[AbstractAsyncContextManager[Permit], Permit] | None:
        """The server's permit, or None when it left rotation (or gave up) first."""
        inner_cm = backend.admission.slot(group_id)
        entering = asyncio.ensure_future(inner_cm.__aenter__())
        left = asyncio.ensure_future(backend.left.wait())
        try:
            await asyncio.wait({entering, left}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            left.cancel()
            entering.cancel()
            await asyncio.gather(entering, left, return_exceptions=True)
            if not entering.cancelled() and entering.exception() is None:
                cancel = asyncio.CancelledError()
                await inner_cm.__aexit__(type(cancel), cancel, None)
            self._release(backend)
            raise
        left.cancel()
        if not entering.done():
            entering.cancel()
        await asyncio.gather(entering, left, return_exceptions=True)
        if entering.cancelled():
            return None
        error = entering.exception()
        if error is None:
            return inner_cm, entering.result()  # admitted, even if it just left rotation
        if isinstance(error, ServerUnavailableError | GateClosedError) and not self._closed:
            backend.health = replace(backend.health, refused_at=self._clock.now())
            self._refresh()
            return None
        raise error

    async def _wait_for_rotation(self, waiting_since: float) -> None:
        """Wait until some server is in rotation; give up after unavailable_after."""
        self._changed.clear()
        self._refresh()
        if any(b.rotating for b in self._backends):
            return
        timeout = self._interval * 5
        if self._unavailable_after is not None:
            left = waiting_since + self._unavailable_after - self._clock.now()
            if left <= 0:
                raise ServerUnavailableError(
                    f"no server in rotation for {self._unavailable_after:.0f} s"
                )
            timeout = min(timeout, left)
        await wait_for_event(self._changed, self._clock, timeout)

    def _loads(self) -> list[ServerLoad]:
        now = self._clock.now()
        return [ServerLoad(b.rotating, b.assigned, b.capacity(now)) for b in self._backends]

    # ------------------------------------------------------------------ inspection

    def signals(self, now: float) -> AdmissionSignals:
        """The servers' signals summed; paused while no server is in rotation."""
        inner = [b.admission.signals(now) for b in self._backends]
        limits = [s.limit for b, s in zip(self._backends, inner, strict=True) if b.rotating]
        readings = [s.reading_at for s in inner if s.reading_at is not None]
        return AdmissionSignals(
            in_flight=sum(s.in_flight for s in inner),
            queued=sum(s.queued for s in inner),
            limit=None if None in limits else sum(limit or 0 for limit in limits),
            paused=None if any(b.rotating for b in self._backends) else "no server in rotation",
            reading_at=max(readings) if readings else None,
        )

    def snapshot(self) -> dict[str, Any]:
        servers: list[dict[str, Any]] = []
        for backend in self._backends:
            try:
                inner = backend.admission.snapshot()
            except Exception:  # a snapshot must not fail the run
                inner = {}
            servers.append({
                "url": backend.url,
                "in_rotation": backend.rotating,
                "assigned": backend.assigned,
                "routed": backend.routed,
                "answered": backend.answered,
                "rerouted": backend.rerouted,
                "refusals": backend.health.refusals,
                "admission": inner,
            })

        def total(key: str) -> int:
            return sum(int(s["admission"].get(key) or 0) for s in servers)

        return {
            "kind": "router",
            "servers": servers,
            "in_rotation": sum(1 for s in servers if s["in_rotation"]),
            "in_flight": total("in_flight"),
            "queued": total("queued"),
            "releases": total("releases"),
            "pauses": total("pauses"),
            "paused": None if any(s["in_rotation"] for s in servers) else "no server in rotation",
        }

    def __repr__(self) -> str:
        parts = ", ".join(f"{b.url}:{'in' if b.rotating else 'out'}/{b.assigned}"
                          for b in self._backends)
        return f"Router({parts})"
