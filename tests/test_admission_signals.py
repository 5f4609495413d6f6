"""Admission.signals: what a router reads of a gate, a fixed limit and another router."""

from __future__ import annotations

import asyncio

from pagegate.admission import FixedLimit, Gate, GateConfig, MetricsError, Reading
from pagegate.admission.base import Admission, AdmissionSignals
from pagegate.admission.router import Router
from pagegate.clock import FakeClock, settle


class Source:
    """A metrics source that answers `reading` at the clock's time, or fails."""

    def __init__(self, clock: FakeClock, *, waiting: int = 0, fail: bool = False) -> None:
        self.clock, self.waiting, self.fail = clock, waiting, fail

    async def __call__(self) -> Reading:
        if self.fail:
            raise MetricsError("down")
        return Reading(waiting=self.waiting, running=0, kv_usage=0.0, at=self.clock.now())


def test_fixed_limit_signals_count_holders_and_waiters() -> None:
    async def scenario() -> None:
        fixed = FixedLimit(1)
        assert fixed.signals(0.0) == AdmissionSignals(in_flight=0, queued=0, limit=1)
        async with fixed.slot("g"):
            waiter = asyncio.ensure_future(fixed.slot("g").__aenter__())
            await settle()
            assert fixed.signals(0.0) == AdmissionSignals(in_flight=1, queued=1, limit=1)
            waiter.cancel()
            await asyncio.gather(waiter, return_exceptions=True)
        assert fixed.signals(0.0) == AdmissionSignals(in_flight=0, queued=0, limit=1)

    asyncio.run(scenario())


def test_gate_signals_name_its_limit_pause_and_newest_reading() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        config = GateConfig(initial_concurrency=8)
        source = Source(clock)
        async with Gate(config, source, clock) as gate:
            assert gate.signals(clock.now()) == AdmissionSignals(
                in_flight=0, queued=0, limit=8, paused="no_reading", reading_at=None)
            await settle()
            await clock.advance(2.0)
            assert gate.signals(clock.now()) == AdmissionSignals(
                in_flight=0, queued=0, limit=8, paused=None, reading_at=2.0)
            source.fail = True
            await clock.advance(6.0)
            assert gate.signals(clock.now()).paused == "stale"

    asyncio.run(scenario())


def test_router_signals_sum_its_servers_and_pause_when_none_rotates() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        source = Source(clock)
        config = GateConfig(initial_concurrency=8)
        async with Gate(config, source, clock) as gate:
            await settle()
            backends: list[tuple[str, Admission]] = [("a", FixedLimit(3)), ("b", gate)]
            async with Router(backends, clock=clock) as router:
                signals = router.signals(clock.now())
                assert signals == AdmissionSignals(
                    in_flight=0, queued=0, limit=11, paused=None, reading_at=0.0)
                nested: list[tuple[str, Admission]] = [("r", router)]
                async with Router(nested, clock=clock) as outer:
                    assert outer.signals(clock.now()).limit == 11
            async with Router([("b", gate)], clock=clock) as alone:
                source.fail = True
                await clock.advance(6.0)
                await settle()
                assert alone.signals(clock.now()).paused == "no server in rotation"

    asyncio.run(scenario())
