"""`SimEngine`: the asyncio shell around the pure `NodeModel`.

One task advances the model to `clock.now()` and sleeps until its next event (an engine
step ending, the front end finishing a piece of work), at least `MIN_WAKE_WALL_S` of wall
time, so a fast profile does not wake thousands of times a second (replies are late by at
most that). A submission or a probe wakes it. With a `ScaledClock(factor)` the whole
server runs `factor` times faster than real time.

Requests and probes get futures: a request's resolves with its `Finished` or fails with
the error the server answered (QueueFullError 503, RequestTooLongError 400,
EngineDeadError 500); a probe's resolves when the front end's event loop got to it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
from collections.abc import Callable

from pagegate.clock import Clock, LoopClock, MonotonicClock, ScaledClock
from pagegate.sim.config import SimConfig
from pagegate.sim.node import NodeModel
from pagegate.sim.profiles import ServerProfile
from pagegate.sim.records import (
    EngineDeadError,
    Finished,
    NodeSnapshot,
    QueueFullError,
    RequestTooLongError,
)

MIN_WAKE_WALL_S = 0.002
"""Shortest engine-task sleep in wall seconds (scaled by the time scale into sim seconds)."""


class SimEngine:
    """Owns the model and wakes it: one task advances time and resolves what finished."""

    def __init__(
        self, config: SimConfig, clock: Clock, *, profile: ServerProfile | None = None,
        min_wake_s: float | None = None,
    ) -> None:
        """`profile` replaces the config's named one (an engine of the random family);
        `min_wake_s` the shortest sleep in sim seconds (0 under virtual time, where a
        wake costs no wall time)."""
        self.config = config
        self.clock = clock
        self.profile = profile or config.server_profile()
        self.node = NodeModel(self.profile, start=clock.now())
        self.requests_seen = 0
        self.samples: collections.Counter[str] = collections.Counter()
        """Replies cut off at max_tokens per page digest: its next request's sample number."""
        self._tick = MIN_WAKE_WALL_S * config.time_scale if min_wake_s is None else min_wake_s
        self._waiters: dict[str, asyncio.Future[Finished]] = {}
        self._probes: dict[str, asyncio.Future[None]] = {}
        self._probe_ids = itertools.count()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._crash_listeners: list[Callable[[], None]] = []
        self._crash_announced = False

    @property
    def crashed(self) -> bool:
        return self.node.crashed

    @property
    def hung(self) -> bool:
        return self.node.hung

    def hang(self) -> None:
        """Stop stepping the engines for good (a hung engine; only a restart helps)."""
        self.node.hang(self.clock.now())

    def nudge(self) -> None:
        """The model was changed from outside (a fault paused or resumed it): deliver what
        that settled and wake the engine task to plan its next wake."""
        self.refresh()
        self._poke()

    def on_crash(self, listener: Callable[[], None]) -> None:
        """Call `listener` once, right after the requests in flight have been failed."""
        self._crash_listeners.append(listener)

    def start(self) -> None:
        """Start the engine task in the running loop (idempotent)."""
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def submit(
        self, req_id: str, prompt: int, output: int, max_tokens: int, *, body_bytes: int,
        pixels: int,
    ) -> asyncio.Future[Finished]:
        """Hand a request to the server; the future resolves when it is answered.

        Raises EngineDeadError when dead (and, without a front end, what the engine
        refuses at once). If this submission kills the server, every future in flight
        fails with EngineDeadError.
        """
        self.start()
        future: asyncio.Future[Finished] = asyncio.get_running_loop().create_future()
        limit = self.config.hang_after_requests
        if limit and self.requests_seen >= limit and not self.node.hung:
            self.hang()
        self.node.submit(req_id, prompt, output, max_tokens, self.clock.now(),
                         body_bytes=body_bytes, pixels=pixels)
        self._waiters[req_id] = future
        self.refresh()
        self._poke()
        return future

    def probe(self, *, scrape: bool = True, named: bool = False) -> asyncio.Future[None]:
        """A /metrics (scrape) or /health probe: resolves once the front end answers it."""
        self.start()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.node.crashed:
            future.set_result(None)
            return future
        probe_id = f"probe-{next(self._probe_ids)}"
        self._probes[probe_id] = future
        self.node.probe(probe_id, self.clock.now(), scrape=scrape, named=named)
        self.refresh()
        self._poke()
        return future

    def abort(self, req_id: str) -> None:
        self._waiters.pop(req_id, None)
        if not self.node.crashed:
            self.node.abort(req_id, self.clock.now())
        self.refresh()
        self._poke()  # a shorter batch may finish the next request sooner

    def snapshot(self) -> NodeSnapshot:
        """The metrics now (after delivering what finished by now)."""
        self.refresh()
        return self.node.snapshot()

    def refresh(self) -> None:
        """Bring the model up to now and deliver what finished (and what was refused)."""
        node = self.node
        if not node.crashed:
            for done in node.advance(self.clock.now()):
                self._resolve(done.req_id, done)
            for refused in node.take_refused():
                error: Exception = (QueueFullError(refused.message) if refused.status == 503
                                    else RequestTooLongError(refused.message))
                self._resolve(refused.req_id, error)
            for probe_id, _ in node.take_answered():
                self._answer(probe_id)
        if node.crashed and not self._crash_announced:
            self._crash_announced = True
            reason = node.crash_reason or "engine died"
            waiters, self._waiters = self._waiters, {}
            for future in waiters.values():
                if not future.done():
                    future.set_exception(EngineDeadError(reason))
            for probe_id in list(self._probes):
                self._answer(probe_id)
            for listener in self._crash_listeners:
                listener()

    def _resolve(self, req_id: str, outcome: Finished | Exception) -> None:
        future = self._waiters.pop(req_id, None)
        if future is None or future.done():
            return
        if isinstance(outcome, Exception):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    def _answer(self, probe_id: str) -> None:
        future = self._probes.pop(probe_id, None)
        if future is not None and not future.done():
            future.set_result(None)

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        assert self._wake is not None
        while not self.node.crashed:
            self.refresh()
            next_at = self.node.next_wake_at()
            self._wake.clear()
            if next_at is None:
                await self._wake.wait()
                continue
            delay = max(next_at - self.clock.now(), self._tick)
            timer = _loop_timer(self.clock, delay, self._wake.set)
            if timer is not None:
                try:
                    await self._wake.wait()
                finally:
                    timer.cancel()
                continue
            sleeper = asyncio.ensure_future(self.clock.sleep(delay))
            woken = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait({sleeper, woken}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (sleeper, woken):
                    task.cancel()
        self.refresh()


def _loop_timer(clock: Clock, seconds: float, callback: Callable[[], object]) -> asyncio.TimerHandle | None:
    """A loop timer firing after `seconds` of `clock`, for clocks the loop's own time
    drives; None for a clock only its owner moves (FakeClock). A timer costs no task, and
    a run in virtual time wakes the engine task once per reply or front-end event."""
    loop = asyncio.get_running_loop()
    if isinstance(clock, LoopClock | MonotonicClock):
        return loop.call_later(seconds, callback)
    if isinstance(clock, ScaledClock):
        return loop.call_later(seconds / clock.factor, callback)
    return None
