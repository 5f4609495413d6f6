"""The runtime Gate: a fake clock, a scripted metrics source, real asyncio tasks, no sleeps."""

from __future__ import annotations

import asyncio
import logging
import math
import unittest.mock
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from pagegate.admission import (
    Gate,
    GateClosedError,
    GateConfig,
    GateTuning,
    MetricsError,
    Outcome,
    Reading,
)
from pagegate.admission.policy import Actions, Event, GateState, step
from pagegate.admission.waiters import Waiters
from pagegate.clock import FakeClock, settle
from pagegate.errors import CapacityError, ServerUnavailableError

SAFETY_SECONDS = 10.0
"""Wall-clock guard so a regression fails the test instead of hanging the suite."""


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async def guarded() -> None:
        async with asyncio.timeout(SAFETY_SECONDS):
            await scenario()

    asyncio.run(guarded())


class ScriptedMetrics:
    """A metrics source the test steers: the values it reports, or a failure, or a hang."""

    def __init__(self, clock: FakeClock, *, waiting: int = 0, running: int = 0, kv: float = 0.0) -> None:
        self.clock = clock
        self.waiting, self.running, self.kv = waiting, running, kv
        self.mode = "ok"
        self.calls = 0

    async def __call__(self) -> Reading:
        self.calls += 1
        if self.mode == "fail":
            raise MetricsError("scripted: connection refused")
        if self.mode == "hang":
            await asyncio.get_running_loop().create_future()  # only the gate's timeout ends it
        return Reading(waiting=self.waiting, running=self.running, kv_usage=self.kv, at=self.clock.now())


class Workers:
    """Page workers that enter `gate.slot`, record admission, and hold until released."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.admitted: list[int] = []
        self.errors: dict[int, BaseException] = {}
        self.release_events: dict[int, asyncio.Event] = {}
        self.outcomes: dict[int, Outcome] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, n: int, group: str = "g") -> None:
        for _ in range(n):
            i = len(self.tasks)
            self.release_events[i] = asyncio.Event()
            self.tasks.append(asyncio.create_task(self._work(i, group)))

    async def _work(self, i: int, group: str) -> None:
        try:
            async with self.gate.slot(group) as permit:
                self.admitted.append(i)
                await self.release_events[i].wait()
                permit.finish(self.outcomes.get(i, Outcome.OK))
        except Exception as exc:
            self.errors[i] = exc

    def finish(self, *indexes: int, outcome: Outcome = Outcome.OK) -> None:
        for i in indexes:
            self.outcomes[i] = outcome
            self.release_events[i].set()

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def unit_of(pages: int, **overrides: Any) -> GateConfig:
    """A config whose every unit holds exactly `pages`, with pacing out of the way."""
    values: dict[str, Any] = {
        "unit_pages": pages,
        "initial_concurrency": 256,
        "max_in_flight_pages": 256,
    }
    values.update(overrides)
    tuning = GateTuning(pace_min_rate=1000.0)
    return GateConfig(**values, tuning=tuning)


# ------------------------------------------------------------------------- the rules, at runtime


def test_first_release_is_immediate_when_the_server_is_idle() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        async with Gate(unit_of(8), ScriptedMetrics(clock), clock) as gate:
            workers = Workers(gate)
            workers.start(3)
            await settle()
            assert sorted(workers.admitted) == [0, 1, 2]
            assert clock.now() == 0.0
            assert gate.snapshot()["releases"] == 1
            await workers.stop()

    run(scenario)


def test_fifty_waiters_and_a_flip_to_low_release_exactly_one_unit() -> None:
    """60 workers wait on a busy server; the metrics drop all at once; one unit goes."""

    async def scenario() -> None:
        clock = FakeClock()
        metrics = ScriptedMetrics(clock, waiting=50, running=100)  # 50 > 0.1 x peak 100
        async with Gate(unit_of(5, initial_concurrency=4), metrics, clock) as gate:
            workers = Workers(gate)
            workers.start(60)
            for _ in range(5):
                await clock.advance(1.0)
            assert workers.admitted == []
            assert gate.snapshot()["last_decision"] == "peak_ratio"

            metrics.waiting = 0  # the flip: every waiter sees it at once
            await clock.advance(1.0)
            assert gate.snapshot()["releases"] == 1
            assert gate.state.units.open_credits + gate.state.admitted_total == 5
            for _ in range(3):
                await clock.advance(1.0)
            # C (4) grows only as pages come back: the unit's fifth page waits for the
            # first completions.
            assert workers.admitted == [0, 1, 2, 3]
            workers.finish(0, 1, 2, 3)
            await clock.advance(1.0)
            assert workers.admitted == [0, 1, 2, 3, 4]  # exactly one unit, FIFO
            assert gate.snapshot()["releases"] == 1

            workers.finish(4)  # progress, but the cooldown still holds
            released_at = gate.snapshot()["last_release_at"]
            while clock.now() < released_at + 29.0:
                await clock.advance(1.0)
            assert len(workers.admitted) == 5
            assert gate.snapshot()["last_decision"] == "cooldown"

            await clock.advance(1.0)  # 30 s after the first release
            # The second unit covers two cooldowns of the drain the five pages showed;
            # C, grown by the pages back, lets its first pages go, FIFO.
            snap = gate.snapshot()
            assert snap["releases"] == 2
            assert snap["last_release_pages"] == math.ceil(2 * snap["last_release_drain"] * 30.0) > 5
            in_flight = gate.state.in_flight
            assert in_flight == gate.state.concurrency.limit > 4
            assert workers.admitted == list(range(5 + in_flight))
            workers.finish(5)
            await clock.advance(1.0)
            admitted = len(workers.admitted)  # the page back frees a slot and grows C
            assert workers.admitted == list(range(admitted)) and admitted > 5 + in_flight
            assert gate.snapshot()["releases"] == 2  # still the same unit
            await workers.stop()

    run(scenario)


def test_no_release_before_progress() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        async with Gate(unit_of(2), ScriptedMetrics(clock), clock) as gate:
            workers = Workers(gate)
            workers.start(6)
            await settle()
            assert workers.admitted == [0, 1]
            for _ in range(60):
                await clock.advance(1.0)
            assert workers.admitted == [0, 1]
            assert gate.snapshot()["last_decision"] == "progress"
            workers.finish(1)
            await clock.advance(1.0)
            assert workers.admitted == [0, 1, 2, 3]
            await workers.stop()

    run(scenario)


def test_a_finished_page_wakes_the_loop_to_admit_the_next() -> None:
    """With C = 2, each completion lets the next credited page in without any timer."""

    async def scenario() -> None:
        clock = FakeClock()
        config = unit_of(5, initial_concurrency=2)
        metrics = ScriptedMetrics(clock, running=2, kv=0.95)  # KV pressure: C does not grow
        async with Gate(config, metrics, clock) as gate:
            workers = Workers(gate)
            workers.start(5)
            await settle()
            assert workers.admitted == [0, 1]
            workers.finish(0)
            await settle()
            assert workers.admitted == [0, 1, 2]
            assert clock.now() == 0.0
            await workers.stop()

    run(scenario)


# ------------------------------------------------------------------------- frontend gap, latency


def test_the_front_end_sees_only_requests_sent() -> None:
    """Pages still rendering inside their permit are not on the wire: the front end's
    gap and its sends count only requests whose holder called `sent()` (once each)."""

    async def scenario() -> None:
        clock = FakeClock()
        metrics = ScriptedMetrics(clock)  # the engine sees nothing of ours
        async with Gate(unit_of(64), metrics, clock) as gate:
            permits: list[Any] = []
            hold = asyncio.Event()

            async def page() -> None:
                async with gate.slot("g") as permit:
                    permits.append(permit)
                    await hold.wait()

            tasks = [asyncio.create_task(page()) for _ in range(20)]
            await settle()
            assert len(permits) == 20
            for _ in range(3):  # 20 pages "rendering": admitted, nothing sent
                await clock.advance(1.0)
            assert (gate.state.front.gap, gate.state.front.sent_seen) == (0.0, 0)

            for permit in permits[:10]:
                permit.sent()
                permit.sent()  # twice is harmless
            await clock.advance(1.0)
            assert (gate.state.front.gap, gate.state.front.sent_seen) == (10.0, 10)
            assert gate.snapshot()["frontend_latency"] is not None
            assert gate.snapshot()["queue_estimate"] == 0.0  # no page back: no rate yet

            hold.set()
            await asyncio.gather(*tasks)
            await clock.advance(1.0)
            assert gate.state.front.gap == 0.0  # finished pages leave the count

    run(scenario)


def test_page_latency_reaches_the_policy() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        async with Gate(unit_of(8), ScriptedMetrics(clock, running=2), clock) as gate:
            workers = Workers(gate)
            workers.start(2)
            await settle()
            assert gate.snapshot()["mean_latency"] is None
            await clock.advance(12.0)
            workers.finish(0)
            await settle()
            snap = gate.snapshot()
            assert snap["mean_latency"] == pytest.approx(12.0)
            await workers.stop()

    run(scenario)


# ------------------------------------------------------------------------- permits come back


def test_permit_outcomes_on_success_error_capacity_and_explicit_finish() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        async with Gate(unit_of(16), ScriptedMetrics(clock), clock) as gate:
            async with gate.slot("g"):
                assert gate.state.in_flight == 1
            with pytest.raises(ValueError):
                async with gate.slot("g"):
                    raise ValueError("unparseable reply")
            credits = gate.state.units.open_credits
            with pytest.raises(CapacityError):
                async with gate.slot("g"):
                    raise CapacityError("503", status=503)
            assert gate.state.units.open_credits == credits  # the credit came back
            async with gate.slot("g") as permit:
                permit.finish(Outcome.CONTENT)
            snap = gate.snapshot()
            assert snap["in_flight"] == 0
            assert snap["outcomes"] == {"ok": 1, "content": 2, "capacity": 1, "cancelled": 0}
            assert snap["completed"] == 3

    run(scenario)


def test_permit_comes_back_when_the_holder_is_cancelled() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        async with Gate(unit_of(4), ScriptedMetrics(clock), clock) as gate:
            workers = Workers(gate)
            workers.start(1)
            await settle()
            assert gate.state.in_flight == 1
            await workers.stop()
            assert gate.state.in_flight == 0
            assert gate.snapshot()["outcomes"]["cancelled"] == 1

    run(scenario)


def test_permit_comes_back_on_timeout_in_flight_and_while_waiting() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        metrics = ScriptedMetrics(clock)
        async with Gate(unit_of(1), metrics, clock) as gate:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(None) as deadline:
                    async with gate.slot("g"):
                        deadline.reschedule(asyncio.get_running_loop().time())  # expires now
                        await asyncio.Event().wait()  # the request never answers
            assert gate.state.in_flight == 0
            assert gate.snapshot()["outcomes"]["cancelled"] == 1

            metrics.mode = "fail"  # the reading goes stale: no page may go
            await clock.advance(6.0)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0):
                    async with gate.slot("g"):
                        pytest.fail("must not be admitted")
            assert gate.state.queued == 0

    run(scenario)


class RacingGate(Gate):
    """Cancels chosen waiters in the very step that admits them (a real race, staged)."""

    victims: list[asyncio.Task[None]]

    def _act(self, actions: Actions, now: float) -> None:
        super()._act(actions, now)
        if actions.admitted:
            for task in self.victims:
                task.cancel()
            self.victims = []


def test_a_waiter_cancelled_as_it_is_admitted_gives_the_page_back() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        metrics = ScriptedMetrics(clock, waiting=50, running=100)
        async with RacingGate(unit_of(4), metrics, clock) as gate:
            workers = Workers(gate)
            workers.start(1)
            await settle()
            gate.victims = list(workers.tasks)
            metrics.waiting = 0
            await clock.advance(1.0)
            assert workers.admitted == []
            assert gate.state.in_flight == 0
            assert gate.state.queued == 0
            assert gate.state.units.open_credits == 4  # the credit went back to the unit
            assert gate.snapshot()["outcomes"]["cancelled"] == 1

    run(scenario)


# ------------------------------------------------------------------------- closing, failures


def test_aclose_releases_every_waiter_with_an_error() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        metrics = ScriptedMetrics(clock, waiting=50, running=100)
        gate = Gate(unit_of(4), metrics, clock)
        await gate.start()
        workers = Workers(gate)
        workers.start(10)
        await settle()
        await gate.aclose()
        await asyncio.gather(*workers.tasks)
        assert len(workers.errors) == 10
        assert all(isinstance(e, GateClosedError) for e in workers.errors.values())
        assert gate.state.queued == 0
        with pytest.raises(GateClosedError):
            async with gate.slot("g"):
                pass
        await gate.aclose()  # idempotent

    run(scenario)


def test_pages_in_flight_finish_normally_after_close() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        gate = Gate(unit_of(4), ScriptedMetrics(clock), clock)
        await gate.start()
        workers = Workers(gate)
        workers.start(1)
        await settle()
        await gate.aclose()
        workers.finish(0)
        await asyncio.gather(*workers.tasks)
        assert workers.errors == {}
        assert gate.state.in_flight == 0

    run(scenario)


def test_stale_metrics_freeze_releases_and_pages_only_replace_pages_back() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        metrics = ScriptedMetrics(clock)
        config = unit_of(6, initial_concurrency=2)
        async with Gate(config, metrics, clock) as gate:
            workers = Workers(gate)
            workers.start(12)
            await settle()
            assert workers.admitted == [0, 1]  # C = 2 of the 6 credits
            await clock.advance(1.0)  # a good reading with both pages in flight

            metrics.mode = "fail"
            await clock.advance(6.0)  # the last good reading is now stale
            workers.finish(0, 1)
            for _ in range(40):
                await clock.advance(1.0)
            # Blind, the gate replaces the two pages that came back and sends nothing more;
            # once no page has come back for stale_after, it pauses again.
            assert workers.admitted == [0, 1, 2, 3]
            snap = gate.snapshot()
            assert snap["paused"] == "stale"
            assert snap["pauses"] == 2
            assert snap["ack_clocked_pages"] == 2  # pages 2 and 3, sent on the stale reading
            assert snap["releases"] == 1
            assert "scripted" in snap["last_scrape_error"]

            metrics.mode = "ok"
            await clock.advance(1.0)
            assert len(workers.admitted) > 2
            assert gate.snapshot()["paused"] is None
            await workers.stop()

    run(scenario)


def test_unreachable_server_pauses_admission_instead_of_failing_pages() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        metrics = ScriptedMetrics(clock)
        metrics.mode = "hang"  # connections that never answer
        config = unit_of(4, unavailable_after_seconds=120.0)
        async with Gate(config, metrics, clock) as gate:
            workers = Workers(gate)
            workers.start(3)
            for _ in range(119):
                await clock.advance(1.0)
            assert workers.admitted == [] and workers.errors == {}  # waiting, not failed
            assert metrics.calls > 10  # the poller kept trying: each scrape timed out
            assert gate.snapshot()["paused"] == "no_reading"

            await clock.advance(1.0)
            await asyncio.gather(*workers.tasks)
            assert len(workers.errors) == 3
            assert all(isinstance(e, ServerUnavailableError) for e in workers.errors.values())
            # the failed scrapes' own error, kept by the gate while the policy saw time pass
            assert all("metrics scrape" in str(e) for e in workers.errors.values())
            assert gate.state.queued == 0
            assert gate.snapshot()["unavailable_failures"] == 3

    run(scenario)


def test_a_failing_scrape_never_counts_as_an_idle_server() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        metrics = ScriptedMetrics(clock)
        metrics.mode = "fail"
        async with Gate(unit_of(4), metrics, clock) as gate:
            workers = Workers(gate)
            workers.start(2)
            for _ in range(10):
                await clock.advance(1.0)
            assert workers.admitted == []
            assert gate.snapshot()["last_reading"] is None
            await workers.stop()

    run(scenario)


def broken_step(state: GateState, event: Event, now: float, config: GateConfig) -> Any:
    """A policy step with a bug: it fails once pages are waiting."""
    if state.queued:
        raise RuntimeError("policy bug")
    return step(state, event, now, config)


def test_a_crashed_decision_loop_fails_waiters_instead_of_hanging() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        with unittest.mock.patch("pagegate.admission.gate.step", broken_step):
            await broken_scenario(clock)

    async def broken_scenario(clock: FakeClock) -> None:
        busy = ScriptedMetrics(clock, waiting=50, running=100)  # pages wait at the gate
        async with Gate(unit_of(4), busy, clock) as gate:
            await settle()
            workers = Workers(gate)
            workers.start(3)
            await asyncio.gather(*workers.tasks)
            assert len(workers.errors) == 3
            assert all(isinstance(e, GateClosedError) for e in workers.errors.values())
            assert isinstance(workers.errors[0].__cause__, RuntimeError)
            assert gate.snapshot()["closed"]

    run(scenario)


# ------------------------------------------------------------------------- inspection, lifecycle


def test_releases_are_logged_with_the_reading_and_shown_in_the_snapshot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        clock = FakeClock(start=100.0)
        metrics = ScriptedMetrics(clock, waiting=1, running=40, kv=0.5)
        async with Gate(unit_of(7), metrics, clock) as gate:
            workers = Workers(gate)
            workers.start(2)
            await settle()
            snap = gate.snapshot()
            assert snap["releases"] == 1
            assert snap["last_release_at"] == 100.0
            assert snap["last_release_pages"] == 7
            assert snap["last_release_reading"]["running"] == 40
            assert snap["peak"] == 40.0
            assert snap["admitted"] == 2 and snap["in_flight"] == 2
            assert snap["open_credits"] == 5
            assert snap["concurrency_limit"] >= 1
            await workers.stop()

    with caplog.at_level(logging.INFO, logger="pagegate.gate"):
        run(scenario)
    releases = [r.getMessage() for r in caplog.records if "release 1" in r.getMessage()]
    assert releases and "waiting=1 running=40 kv=0.50" in releases[0]


def test_gate_must_be_created_inside_a_running_loop() -> None:
    async def source() -> Reading:
        raise MetricsError("unused")

    with pytest.raises(RuntimeError):
        Gate(GateConfig(), source, FakeClock())


def test_slot_before_start_is_an_error() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        gate = Gate(GateConfig(), ScriptedMetrics(clock), clock)
        with pytest.raises(RuntimeError, match="not started"):
            async with gate.slot("g"):
                pass

    run(scenario)


class HoldingEngine:
    """A stand-in server whose gauges always look calm: nothing waiting, and running is
    exactly what it holds of ours (the gate's pages in flight)."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.gate: Gate | None = None

    async def __call__(self) -> Reading:
        held = 0 if self.gate is None else self.gate.state.in_flight
        return Reading(waiting=0, running=held, kv_usage=0.1, at=self.clock.now())


def test_a_hung_engine_with_calm_gauges_gets_no_more_pages_until_pages_come_back() -> None:
    """The engine stops completing for 12 s while its gauges stay calm (a hung engine
    looks like this: vLLM #39863). C grows only on pages back, so once the pages in
    flight fill C nothing more is admitted during the stall; when pages come back
    again, C grows again."""

    async def scenario() -> None:
        clock = FakeClock()
        engine = HoldingEngine(clock)
        config = unit_of(1000, initial_concurrency=8, max_in_flight_pages=1000)
        async with Gate(config, engine, clock) as gate:
            engine.gate = gate
            workers = Workers(gate)
            workers.start(400)
            finished = 0
            for _ in range(3):  # a healthy start: every page comes back within a second
                await clock.advance(1.0)
                admitted = len(workers.admitted)
                workers.finish(*range(finished, admitted))
                finished = admitted
            await clock.advance(1.0)
            assert gate.state.concurrency.limit > 8  # C grew on the pages that came back

            stall_start = len(workers.admitted)
            await clock.advance(3.0)  # the stall's first 3 s: C's room is used up
            after_three = len(workers.admitted)
            for _ in range(9):  # 9 more calm seconds, nothing back
                await clock.advance(1.0)
            assert len(workers.admitted) == after_three  # not one page more
            assert after_three - stall_start <= gate.state.concurrency.limit

            limit = gate.state.concurrency.limit
            workers.finish(*range(finished, finished + 10))  # the engine answers again
            await clock.advance(1.0)
            await clock.advance(1.0)
            assert gate.state.concurrency.limit > limit
            assert len(workers.admitted) > after_three
            await workers.stop()

    run(scenario)


def test_waiters_drop_the_cancelled_ones_that_their_handlers_have_not_settled() -> None:
    """A waiting task cancelled between two steps: the next step must not count it."""

    async def scenario() -> None:
        waiters = Waiters()
        first, second, third = waiters.join(), waiters.join(), waiters.join()
        assert waiters.drop_cancelled() == 0  # nothing cancelled: no scan, nothing dropped
        second.cancel()  # what Task.cancel() does to the future its task awaits
        assert waiters.drop_cancelled() == 1
        assert not waiters.discard(second)  # its own handler then settles nothing
        assert waiters.drop_cancelled() == 0
        assert [waiters.next_live(), waiters.next_live(), waiters.next_live()] == [
            first, third, None]

    asyncio.run(scenario())
