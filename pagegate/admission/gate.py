"""The runtime admission gate: enforces what the pure policy decides.

One task, the decision loop, owns every release and every page dispatch, so release
decisions are serialized by construction: waiters only wait on a future, and no
"check, then release" path exists that two coroutines could run at once (the race
olmOCR PR #316 tried to fix with a lock). The loop wakes on a new reading, a page
finishing, a new waiter, or a timer from the injected clock, and on each wake makes one
release decision (at most one unit) before admitting the pages the policy allows.

A second task scrapes the metrics source every poll interval and only queues what it
got for the loop; a failed or timed-out scrape is queued as a failure, never as zeros.

The frontend gap (our requests the engine does not count yet) is measured only over
requests on the wire for over a poll interval: a holder calls `permit.sent()` right
before its HTTP request, so pages still rendering inside their permit never look like a
backlog in the server's front end. A holder that never calls `sent()` gives no gap
signal (the other signals still apply).

Permits always come back (success, exception, cancellation, timeout), closing the gate
fails every waiter with GateClosedError, and a pause that outlasts
`unavailable_after_seconds` fails waiters with ServerUnavailableError: nothing ever
hangs waiting for a release (olmOCR #383).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Any, Self

from pagegate.admission.base import Outcome, Permit, settled
from pagegate.admission.metrics import MetricsPoller
from pagegate.admission.policy import (
    GateConfig,
    GateState,
    Reason,
    ReleaseDecision,
    add_waiter,
    apply_release,
    decide_release,
    dispatch,
    drain_rate,
    initial_state,
    mean_latency,
    next_wake_at,
    observe,
    observe_failure,
    on_outcome,
    page_allowance,
    pause_reason,
    remove_waiter,
    service_rate,
    unavailable,
    unit_size,
    waiting_band,
)
from pagegate.clock import Clock, MonotonicClock
from pagegate.errors import GateClosedError, ServerUnavailableError
from pagegate.server.metrics import Reading

logger = logging.getLogger("pagegate.gate")

MetricsSource = Callable[[], Awaitable[Reading]]
"""An async callable returning a fresh Reading, or raising when none can be had."""


@dataclass(frozen=True, slots=True)
class _ScrapeFailure:
    at: float
    error: str


@dataclass(frozen=True, slots=True)
class _Scrape:
    reading: Reading
    in_flight_at_start: int


@dataclass(frozen=True, slots=True)
class _Release:
    at: float
    pages: int
    reading: Reading


@dataclass(frozen=True, slots=True)
class _Admitted:
    unit_id: int
    at: float


class _Waiter:
    __slots__ = ("future", "group_id")

    def __init__(self, group_id: str, future: asyncio.Future[_Admitted]) -> None:
        self.group_id = group_id
        self.future = future


class _GatePermit:
    """The gate's permit: records the outcome, and tells the gate when the request leaves."""

    __slots__ = ("_on_sent", "outcome")

    def __init__(self, on_sent: Callable[[], None]) -> None:
        self.outcome: Outcome | None = None
        self._on_sent: Callable[[], None] | None = on_sent

    def finish(self, outcome: Outcome) -> None:
        self.outcome = outcome

    def sent(self) -> None:
        if self._on_sent is not None:
            on_sent, self._on_sent = self._on_sent, None
            on_sent()


class Gate:
    """Admits pages to one vLLM server; implements the `Admission` protocol.

        async with Gate(config, MetricsPoller(url, clock=clock), clock) as gate:
            async with gate.slot(group_id) as permit:
                ...
                permit.finish(Outcome.OK)

    Must be created inside the event loop that uses it (asyncio primitives bind to one
    loop; Prefect's thread-pool task runner gives each task its own loop).
    """

    def __init__(
        self, config: GateConfig, metrics: MetricsSource, clock: Clock | None = None
    ) -> None:
        asyncio.get_running_loop()  # raises outside a loop: create the gate where it is used
        self.config = config
        self._metrics = metrics
        self._clock: Clock = clock or MonotonicClock()
        self._state = initial_state(self._clock.now(), config)
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._scrapes: list[_Scrape | _ScrapeFailure] = []
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._owned_poller: MetricsPoller | None = None
        self._decision: ReleaseDecision | None = None
        self._last_release: _Release | None = None
        self._last_scrape_error: str | None = None
        self._paused: Reason | None = Reason.NO_READING
        self._pauses = 0
        self._unavailable_failures = 0
        self._outcomes = {o.value: 0 for o in Outcome}
        self._sent_at: dict[int, float] = {}  # page serial -> when its request left
        self._serial = 0

    @classmethod
    def for_metrics_url(
        cls, config: GateConfig, metrics_url: str, clock: Clock | None = None
    ) -> Gate:
        """A gate that scrapes `metrics_url` with the same clock, and closes the poller."""
        clock = clock or MonotonicClock()
        poller = MetricsPoller.for_config(metrics_url, config, clock=clock)
        gate = cls(config, poller, clock)
        gate._owned_poller = poller
        return gate

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self._closed:
            raise GateClosedError("gate is closed")
        if self._tasks:
            return
        self._tasks = [
            asyncio.create_task(self._poll_forever(), name="pagegate-gate-poll"),
            asyncio.create_task(self._decide_forever(), name="pagegate-gate-loop"),
        ]
        for task in self._tasks:
            task.add_done_callback(self._on_task_done)

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        """A loop that dies of a bug must not leave pages waiting forever: close the gate."""
        if task.cancelled() or task.exception() is None or self._closed:
            return
        error = task.exception()
        logger.critical("gate task %s failed; closing the gate", task.get_name(), exc_info=error)
        self._closed = True
        for other in self._tasks:
            other.cancel()
        failure = GateClosedError(f"gate closed: {task.get_name()} failed: {error!r}")
        failure.__cause__ = error
        self._fail_waiters(failure)

    async def aclose(self) -> None:
        """Stop deciding, fail every waiter with GateClosedError; pages in flight go on."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._fail_waiters(GateClosedError("gate closed while the page was waiting"))
        if self._owned_poller is not None:
            await self._owned_poller.aclose()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ admission

    def slot(self, group_id: str) -> AbstractAsyncContextManager[Permit]:
        return self._slot(group_id)

    @asynccontextmanager
    async def _slot(self, group_id: str) -> AsyncIterator[Permit]:
        if self._closed:
            raise GateClosedError("gate is closed")
        if not self._tasks:
            raise RuntimeError("gate not started: use `async with gate` or `await gate.start()`")
        future: asyncio.Future[_Admitted] = asyncio.get_running_loop().create_future()
        self._waiters.append(_Waiter(group_id, future))
        self._state = add_waiter(self._state)
        self._wake.set()
        try:
            admitted = await future
        except BaseException:
            self._abandon(future)
            raise

        self._serial += 1
        serial = self._serial

        def settle(outcome: Outcome) -> None:
            self._sent_at.pop(serial, None)
            self._finish_page(admitted, outcome)

        with settled(_GatePermit(lambda: self._mark_sent(serial)), settle) as permit:
            yield permit

    def _mark_sent(self, serial: int) -> None:
        self._sent_at[serial] = self._clock.now()

    def _on_the_wire(self, now: float) -> int:
        """Requests sent over a poll interval ago: the engine should count them by now."""
        cutoff = now - self.config.poll_interval_seconds
        return sum(1 for at in self._sent_at.values() if at < cutoff)

    def _abandon(self, future: asyncio.Future[_Admitted]) -> None:
        """A waiter left before using its admission; settle its accounting exactly once.

        Whoever resolves the future accounts for it: the loop when it admits (the page
        is in flight) or fails it (already removed); the waiter itself when cancelled.
        """
        if not future.done():
            future.cancel()
        if future.cancelled():
            self._state = remove_waiter(self._state)
        elif future.exception() is None:  # admitted at the moment it was cancelled
            self._finish_page(future.result(), Outcome.CANCELLED)

    def _finish_page(self, admitted: _Admitted, outcome: Outcome) -> None:
        self._state = on_outcome(
            self._state,
            outcome,
            admitted.unit_id,
            self._clock.now(),
            self.config,
            dispatched_at=admitted.at,
        )
        self._outcomes[outcome.value] += 1
        self._wake.set()

    def _fail_waiters(self, error: BaseException) -> int:
        """Fail every page still waiting; returns how many there were."""
        failed = 0
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.future.done():
                self._state = remove_waiter(self._state)
                waiter.future.set_exception(error)
                failed += 1
        return failed

    # ------------------------------------------------------------------ tasks

    async def _poll_forever(self) -> None:
        interval = self.config.poll_interval_seconds
        while True:
            in_flight = self._on_the_wire(self._clock.now())
            try:
                reading = await self._scrape_with_deadline()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._scrapes.append(_ScrapeFailure(self._clock.now(), repr(exc)))
            else:
                self._scrapes.append(_Scrape(reading, in_flight))
            self._wake.set()
            await self._clock.sleep(interval)

    async def _scrape_with_deadline(self) -> Reading:
        """Call the source, but give up after scrape_timeout on the gate's own clock."""
        scrape = asyncio.ensure_future(self._metrics())
        timer = asyncio.ensure_future(self._clock.sleep(self.config.scrape_timeout_seconds))
        try:
            await asyncio.wait({scrape, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (scrape, timer):
                if not task.done():
                    task.cancel()
            await asyncio.gather(scrape, timer, return_exceptions=True)
        if scrape.cancelled():
            raise TimeoutError(f"metrics scrape took over {self.config.scrape_timeout_seconds} s")
        return scrape.result()

    async def _decide_forever(self) -> None:
        while True:
            self._wake.clear()
            now = self._clock.now()
            self._absorb_scrapes()
            decision = self._decide(now)
            self._note_pause(now)
            if self._waiters and unavailable(self._state, now, self.config):
                failed = self._fail_waiters(
                    ServerUnavailableError("server unavailable; admission paused too long")
                )
                self._unavailable_failures += failed
                logger.error(
                    "no usable reading for %.0f s (%s): failed %d waiting pages",
                    self.config.unavailable_after_seconds or 0.0,
                    self._paused,
                    failed,
                )
            self._dispatch(now)
            if decision.release:  # what the next wake waits for is the post-release view
                decision = decide_release(self._state, now, self.config)
            await self._sleep_until(next_wake_at(self._state, decision, now, self.config))

    def _absorb_scrapes(self) -> None:
        scrapes, self._scrapes = self._scrapes, []
        for scrape in scrapes:
            if isinstance(scrape, _ScrapeFailure):
                self._state = observe_failure(self._state, scrape.at, self.config)
                self._last_scrape_error = scrape.error
            else:
                self._state = observe(
                    self._state,
                    scrape.reading,
                    self.config,
                    in_flight_at_scrape=scrape.in_flight_at_start,
                )

    def _decide(self, now: float) -> ReleaseDecision:
        decision = decide_release(self._state, now, self.config)
        self._decision = decision
        if decision.release:
            self._state = apply_release(self._state, decision, now, self.config)
            reading = self._state.reading
            assert reading is not None  # a release always rests on a reading
            self._last_release = _Release(now, decision.pages, reading)
            logger.info(
                "release %d: unit of %d pages; waiting=%d running=%d kv=%.2f peak=%.1f "
                "(threshold %.1f) C=%d in_flight=%d queued=%d drain=%s pages/s",
                self._state.units_released,
                decision.pages,
                reading.waiting,
                reading.running,
                reading.kv_usage,
                self._state.peak,
                self.config.peak_ratio * self._state.peak,
                self._state.limit,
                self._state.in_flight,
                self._state.queued,
                _fmt(drain_rate(self._state, self.config)),
            )
        return decision

    def _note_pause(self, now: float) -> None:
        reason = pause_reason(self._state, now, self.config)
        if reason is not None and self._paused is None:
            self._pauses += 1
            logger.warning(
                "admission paused: %s (last scrape error: %s)", reason, self._last_scrape_error
            )
        elif reason is None and self._paused is not None:
            logger.info("admission open (was: %s)", self._paused)
        self._paused = reason

    def _dispatch(self, now: float) -> None:
        while self._waiters and page_allowance(self._state, now, self.config) > 0:
            waiter = self._waiters.popleft()
            if waiter.future.done():  # cancelled; its own handler settles the count
                continue
            self._state, unit_id = dispatch(self._state, now, self.config)
            waiter.future.set_result(_Admitted(unit_id, now))

    async def _sleep_until(self, deadline: float | None) -> None:
        if self._wake.is_set():
            return
        if deadline is None:
            await self._wake.wait()
            return
        delay = deadline - self._clock.now()
        if delay <= 0:
            await asyncio.sleep(0)
            return
        waker = asyncio.ensure_future(self._wake.wait())
        timer = asyncio.ensure_future(self._clock.sleep(delay))
        try:
            await asyncio.wait({waker, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waker, timer):
                task.cancel()
            await asyncio.gather(waker, timer, return_exceptions=True)

    # ------------------------------------------------------------------ inspection

    @property
    def state(self) -> GateState:
        """The policy state (read-only view, for tests and dashboards)."""
        return self._state

    def snapshot(self) -> dict[str, Any]:
        state, now = self._state, self._clock.now()
        low, high = waiting_band(state, self.config)
        release = self._last_release
        return {
            "kind": "gate",
            "closed": self._closed,
            "in_flight": state.in_flight,
            "queued": state.queued,
            "admitted": state.admitted_total,
            "completed": state.completed_total,
            "outcomes": dict(self._outcomes),
            "open_credits": state.open_credits,
            "concurrency_limit": state.limit,
            "slow_start": state.slow_start,
            "peak": state.peak,
            "release_threshold": self.config.peak_ratio * state.peak,
            "waiting_band": (low, high),
            "queue_estimate": state.queue,
            "drain_rate": drain_rate(state, self.config),
            "mean_latency": mean_latency(state),
            "service_rate": service_rate(state, self.config),
            "next_unit_pages": unit_size(state, self.config, now),
            "unit_dry_seconds": state.dry_seconds,
            "last_reading": None if state.reading is None else asdict(state.reading),
            "releases": state.units_released,
            "last_release_at": None if release is None else release.at,
            "last_release_pages": None if release is None else release.pages,
            "last_release_reading": None if release is None else asdict(release.reading),
            "last_decision": None if self._decision is None else str(self._decision.reason),
            "paused": _str_or_none(pause_reason(state, now, self.config)),
            "pauses": self._pauses,
            "unavailable_failures": self._unavailable_failures,
            "last_scrape_error": self._last_scrape_error,
        }

    def __repr__(self) -> str:
        s = self._state
        return (
            f"Gate(in_flight={s.in_flight}, queued={s.queued}, C={s.limit}, "
            f"credits={s.open_credits}, releases={s.units_released}, peak={s.peak:.1f})"
        )


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _str_or_none(reason: Reason | None) -> str | None:
    return None if reason is None else str(reason)
