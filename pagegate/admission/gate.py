"""The runtime admission gate: enforces what the pure policy decides.

One task, the decision loop, owns every release and every page dispatch, so release
decisions are serialized by construction: waiters only wait on a future, and no
"check, then release" path exists that two coroutines could run at once (the race
olmOCR PR #316 tried to fix with a lock). The loop wakes on a new reading, a page
finishing, a new waiter, or a timer from the injected clock, and on each wake makes one
release decision (at most one unit) before admitting the pages the policy allows.

A second task (scraper.py) scrapes the metrics source every poll interval and only
queues what it got for the loop; a failed or timed-out scrape is queued as a failure,
never as zeros. What the gate shows of itself (snapshot, signals) is gate_view.py.

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
    GateConfig,
    GateState,
    Reason,
    ReleaseDecision,
    add_waiter,
    apply_release,
    decide_release,
    dispatch,
    initial_state,
    next_wake_at,
    observe,
    observe_failure,
    on_outcome,
    page_allowance,
    pause_reason,
    remove_waiter,
    unavailable,
)
from pagegate.admission.scraper import (
    MetricsSource,
    OnTheWire,
    Scrape,
    ScrapeFailure,
    poll_forever,
)
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
        self._scrapes: list[Scrape | ScrapeFailure] = []
        self._wake = asyncio.Event()
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
                            on_the_wire=self._on_the_wire, deliver=self._deliver)
        self._tasks = [
            asyncio.create_task(poll, name="pagegate-gate-poll"),
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
        future = self._waiters.join()
        self._state = add_waiter(self._state)
        self._wake.set()
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
            self._state = remove_waiter(self._state)
        elif future.exception() is None:  # admitted at the moment it was cancelled
            self._finish_page(future.result(), Outcome.CANCELLED)

    def _finish_page(self, admitted: Admitted, outcome: Outcome) -> None:
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
        failed = self._waiters.fail_all(error)
        for _ in range(failed):
            self._state = remove_waiter(self._state)
        return failed

    # ------------------------------------------------------------------ tasks

    def _deliver(self, scrape: Scrape | ScrapeFailure) -> None:
        self._scrapes.append(scrape)
        self._wake.set()

    async def _decide_forever(self) -> None:
        while True:
            self._wake.clear()
            now = self._clock.now()
            self._absorb_scrapes()
            decision = self._decide(now)
            self._note_pause(now)
            if self._waiters and unavailable(self._state, now, self.config):
                failed = self._fail_waiters(
                    ServerUnavailableError(f"server unavailable; admission paused too long ({self._last_scrape_error})")
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
            if isinstance(scrape, ScrapeFailure):
                self._state = observe_failure(self._state, scrape.at, self.config)
                self._last_scrape_error = scrape.error
            else:
                self._state = observe(
                    self._state,
                    scrape.reading,
                    self.config,
                    in_flight_at_scrape=scrape.in_flight_at_start,
                    sent_at_scrape=scrape.sent_at_start,
                )

    def _decide(self, now: float) -> ReleaseDecision:
        decision = decide_release(self._state, now, self.config)
        self._decision = decision
        if decision.release:
            self._state = apply_release(self._state, decision, now, self.config)
            reading = self._state.reading
            assert reading is not None  # a release always rests on a reading
            self._last_release = Release(now, decision.pages, reading)
            logger.info("%s", release_line(self._state, self.config, self._last_release))
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
            future = self._waiters.next_live()
            if future is None:
                return
            self._state, unit_id = dispatch(self._state, now, self.config)
            future.set_result(Admitted(unit_id, now))

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
        await wait_for_event(self._wake, self._clock, delay)

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
            f"Gate(in_flight={s.in_flight}, queued={s.queued}, C={s.limit}, "
            f"credits={s.open_credits}, releases={s.units_released}, peak={s.peak:.1f})"
        )


