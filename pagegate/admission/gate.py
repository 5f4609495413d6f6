"""The runtime admission gate: enforces what the pure policy decides.

Every event (a scrape, a page joining, leaving or finishing, a timer) goes through one
call of the pure `step`, which makes at most one release decision and says which waiting
pages go in flight; the gate resolves their futures. Steps never await, so release
decisions are serialized by construction: no "check, then release" path exists that two
coroutines could run at once. A scraper task (scraper.py) feeds the scrapes, a timer task
the wakes the last step asked for. What the gate shows of itself is gate_view.py.

Permits always come back (success, exception, cancellation, timeout), closing the gate
fails every waiter with GateClosedError, and a pause that outlasts
`unavailable_after_seconds` fails waiters with ServerUnavailableError: nothing ever
hangs waiting for a release (olmOCR #383).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, Self

from pagegate.admission.base import AdmissionSignals, Outcome, Permit, settled
from pagegate.admission.gate_view import (
    Release,
    RuntimeCounts,
    gate_signals,
    gate_snapshot,
    release_line,
)
from pagegate.admission.metrics import MetricsPoller
from pagegate.admission.policy import (
    Actions,
    Event,
    Finished,
    GateConfig,
    GateState,
    Joined,
    Left,
    Reason,
    ReleaseDecision,
    Tick,
    initial_state,
    step,
)
from pagegate.admission.scraper import MetricsSource, OnTheWire, ScrapeFailed, poll_forever
from pagegate.admission.timing import wait_for_event
from pagegate.admission.waiters import Admitted, GatePermit, Waiters
from pagegate.clock import Clock, MonotonicClock
from pagegate.errors import GateClosedError, ServerUnavailableError

logger = logging.getLogger("pagegate.gate")


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
        self._waiters = Waiters()
        self._wake_at: float | None = None
        self._rescheduled = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._owned_poller: MetricsPoller | None = None
        self._decision: ReleaseDecision | None = None
        self._last_release: Release | None = None
        self._last_scrape_error: str | None = None
        self._paused: Reason | None = Reason.NO_READING
        self._pauses = 0
        self._unavailable_failures = 0
        self._outcomes = {o.value: 0 for o in Outcome}
        self._on_the_wire = OnTheWire(self._clock)

    @classmethod
    def for_metrics_url(
        cls, config: GateConfig, metrics_url: str, clock: Clock | None = None, *,
        named: bool = True,
    ) -> Gate:
        """A gate that scrapes `metrics_url` with the same clock, and closes the poller
        (`named`: as `MetricsPoller`, ask for the gate's samples only)."""
        clock = clock or MonotonicClock()
        poller = MetricsPoller.for_config(metrics_url, config, clock=clock, named=named)
        gate = cls(config, poller, clock)
        gate._owned_poller = poller
        return gate

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self._closed:
            raise GateClosedError("gate is closed")
        if self._tasks:
            return
        poll = poll_forever(self._metrics, self._clock, self.config,
                            on_the_wire=self._on_the_wire, deliver=self._step)
        self._tasks = [
            asyncio.create_task(poll, name="pagegate-gate-poll"),
            asyncio.create_task(self._tick_forever(), name="pagegate-gate-timer"),
        ]
        for task in self._tasks:
            task.add_done_callback(self._on_task_done)

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        """A task that dies of a bug must not leave pages waiting forever: close the gate."""
        if not task.cancelled() and task.exception() is not None:
            self._break(f"{task.get_name()} failed", task.exception())

    def _break(self, what: str, error: BaseException | None) -> None:
        """Close the gate on a bug and fail every waiter with GateClosedError caused by it."""
        if self._closed:
            return
        logger.critical("gate %s; closing the gate", what, exc_info=error)
        self._closed = True
        for other in self._tasks:
            other.cancel()
        failure = GateClosedError(f"gate closed: {what}: {error!r}")
        failure.__cause__ = error
        self._fail_waiters(failure)  # a step that fails again finds the gate closed

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
        future = self._waiters.join()
        self._step(Joined())
        try:
            admitted = await future
        except BaseException:
            self._abandon(future)
            raise

        serial = self._on_the_wire.new_page()

        def settle(outcome: Outcome) -> None:
            self._on_the_wire.done(serial)
            self._finish_page(admitted, outcome)

        with settled(GatePermit(lambda: self._on_the_wire.sent(serial)), settle) as permit:
            yield permit

    def _abandon(self, future: asyncio.Future[Admitted]) -> None:
        """A waiter left before using its admission; settle its accounting exactly once.

        Whoever resolves the future accounts for it: the loop when it admits (the page
        is in flight) or fails it (already removed); the waiter itself when cancelled.
        """
        if not future.done():
            future.cancel()
        if future.cancelled():
            if self._waiters.discard(future):
                self._step(Left())
        elif future.exception() is None:  # admitted at the moment it was cancelled
            self._finish_page(future.result(), Outcome.CANCELLED)

    def _finish_page(self, admitted: Admitted, outcome: Outcome) -> None:
        self._outcomes[outcome.value] += 1
        self._step(Finished(outcome, admitted.unit_id, admitted.at))

    def _fail_waiters(self, error: BaseException) -> None:
        """Fail every page still waiting (the gate closes)."""
        failed = self._waiters.fail_all(error)
        if failed:
            self._step(Left(failed))

    # ------------------------------------------------------------------ steps

    def _step(self, event: Event | ScrapeFailed) -> None:
        """One pure step, then what it says: log, fail or admit waiters, reschedule. A bug
        in it closes the gate rather than leave pages waiting."""
        try:
            self._advance(event)
        except Exception as error:
            self._break("step failed", error)

    def _advance(self, event: Event | ScrapeFailed) -> None:
        now = self._clock.now()
        cancelled = self._waiters.drop_cancelled()
        if cancelled:  # their own handlers see they were dropped and settle nothing
            self._state, actions = step(self._state, Left(cancelled), now, self.config)
            self._act(actions, now)
        if isinstance(event, ScrapeFailed):  # to the policy, only time passing
            self._last_scrape_error, event = event.error, Tick()
        self._state, actions = step(self._state, event, now, self.config)
        self._act(actions, now)

    def _act(self, actions: Actions, now: float) -> None:
        decision = actions.decision
        self._decision = decision
        if decision.release:
            reading, drain = self._state.signals.reading, self._state.rates.drain_rate()
            assert reading is not None  # a release always rests on a reading
            self._last_release = Release(now, decision.pages, reading, drain)
            logger.info("%s", release_line(self._state, self.config, self._last_release))
        self._note_pause(actions.paused)
        if actions.unavailable:
            failed = self._waiters.fail_all(
                ServerUnavailableError(
                    f"server unavailable; admission paused too long ({self._last_scrape_error})"))
            self._unavailable_failures += failed
            logger.error("no usable reading for %.0f s (%s): failed %d waiting pages",
                         self.config.unavailable_after_seconds or 0.0, actions.paused, failed)
        for unit_id in actions.admitted:
            future = self._waiters.next_live()
            assert future is not None, "the policy admitted more pages than wait"
            future.set_result(Admitted(unit_id, now))
        if actions.wake_at != self._wake_at:
            self._wake_at = actions.wake_at
            self._rescheduled.set()

    def _note_pause(self, reason: Reason | None) -> None:
        if reason is not None and self._paused is None:
            self._pauses += 1
            logger.warning(
                "admission paused: %s (last scrape error: %s)", reason, self._last_scrape_error
            )
        elif reason is None and self._paused is not None:
            logger.info("admission open (was: %s)", self._paused)
        self._paused = reason

    async def _tick_forever(self) -> None:
        """Step at the time the last step asked for (a cooldown's end, a token, a deadline)."""
        self._step(Tick())
        while True:
            self._rescheduled.clear()
            deadline = self._wake_at
            if deadline is None:
                await self._rescheduled.wait()
                continue
            delay = deadline - self._clock.now()
            if delay > 0:
                await wait_for_event(self._rescheduled, self._clock, delay)
                if self._rescheduled.is_set():
                    continue
            else:
                await asyncio.sleep(0)
            self._step(Tick())

    # ------------------------------------------------------------------ inspection

    @property
    def state(self) -> GateState:
        """The policy state (read-only view, for tests and dashboards)."""
        return self._state

    def signals(self, now: float) -> AdmissionSignals:
        return gate_signals(self._state, self.config, now)

    def snapshot(self) -> dict[str, Any]:
        counts = RuntimeCounts(
            closed=self._closed,
            outcomes=self._outcomes,
            last_release=self._last_release,
            last_decision=self._decision,
            pauses=self._pauses,
            unavailable_failures=self._unavailable_failures,
            last_scrape_error=self._last_scrape_error,
        )
        return gate_snapshot(self._state, self.config, self._clock.now(), counts)

    def __repr__(self) -> str:
        s = self._state
        return (
            f"Gate(in_flight={s.in_flight}, queued={s.queued}, C={s.concurrency.limit}, "
            f"credits={s.units.open_credits}, releases={s.units.units_released}, "
            f"peak={s.signals.peak:.1f})"
        )


