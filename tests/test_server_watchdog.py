"""The watchdog's pure parts (detector, restart budget) and its supervisor on a FakeClock."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from pagegate.clock import FakeClock, settle
from pagegate.server.restart_budget import RestartBudget
from pagegate.server.watchdog import (
    Condition,
    Probe,
    Supervisor,
    WatchdogConfig,
    WatchLimits,
    WatchState,
    classify,
    observe,
)

LIMITS = WatchLimits(hang_after=60.0, unanswered_after=30.0)


def ok(in_server: int | None = 4, tokens: float | None = 100.0) -> Probe:
    return Probe(process_alive=True, health_status=200, in_server=in_server,
                 generation_tokens_total=tokens)


def run_probes(probes: list[tuple[float, Probe]]) -> list[Condition]:
    """Feed (time, probe) pairs through observe + classify from a fresh state at 0."""
    state = WatchState.fresh(0.0)
    seen = []
    for now, probe in probes:
        state = observe(state, probe, now)
        seen.append(classify(state, probe, now, LIMITS))
    return seen


@pytest.mark.parametrize(
    ("probes", "expected"),
    [
        # tokens move: healthy however long the run
        ([(t, ok(tokens=float(t))) for t in (10, 50, 100, 200)], [Condition.HEALTHY] * 4),
        # work waiting, counter flat: hung once 60 s have passed since it last moved
        ([(0, ok(tokens=5)), (30, ok(tokens=5)), (59, ok(tokens=5)), (60, ok(tokens=5))],
         [Condition.HEALTHY] * 3 + [Condition.HUNG]),
        # flat but idle: not a hang
        ([(0, ok(0, 5)), (100, ok(0, 5)), (200, ok(0, 5))], [Condition.HEALTHY] * 3),
        # idle, then work arrives: the flat clock starts when the work does
        ([(0, ok(0, 5)), (100, ok(3, 5)), (159, ok(3, 5)), (160, ok(3, 5)), (200, ok(0, 5))],
         [Condition.HEALTHY] * 3 + [Condition.HUNG, Condition.HEALTHY]),
        # a server without the counter is never called hung
        ([(0, ok(tokens=None)), (500, ok(tokens=None))], [Condition.HEALTHY] * 2),
        # metrics unreadable (in_server unknown): no evidence of a hang
        ([(0, ok(None, 5)), (500, ok(None, 5))], [Condition.HEALTHY] * 2),
        # process gone: dead at once
        ([(0, ok()), (2, Probe(False, None))], [Condition.HEALTHY, Condition.DEAD]),
        # /health 503: unhealthy at once, even with tokens moving
        ([(2, Probe(True, 503, 4, 1.0))], [Condition.UNHEALTHY]),
        # /health silent: only after 30 s of silence (a slow probe under a burst is fine)
        ([(0, ok(tokens=1)), (2, Probe(True, None)), (20, Probe(True, None)),
          (31, Probe(True, None)), (32, Probe(True, None)), (40, Probe(True, None))],
         [Condition.HEALTHY] * 4 + [Condition.UNRESPONSIVE] * 2),
        # one answer in between resets the silence
        ([(0, Probe(True, None)), (25, ok(tokens=1)), (40, Probe(True, None)),
          (69, Probe(True, None)), (70, Probe(True, None))],
         [Condition.HEALTHY] * 4 + [Condition.UNRESPONSIVE]),
        # dead beats everything else
        ([(0, ok(tokens=5)), (100, Probe(False, 503, 4, 5))], [Condition.HEALTHY, Condition.DEAD]),
    ],
    ids=["progress", "hang", "idle", "work-arrives", "no-counter", "no-metrics", "dead",
         "503", "silent", "silence-reset", "dead-first"],
)
def test_detector(probes: list[tuple[float, Probe]], expected: list[Condition]) -> None:
    assert run_probes(probes) == expected


@pytest.mark.parametrize(
    ("takes_at", "expected"),
    [
        ([0, 0, 0], [True, True, True]),
        ([0, 1, 2, 3], [True, True, True, False]),          # capacity 3, crash loop cut off
        ([0, 1, 2, 3, 599, 603], [True, True, True, False, False, True]),  # one back per 600 s
        ([0, 1, 2, 5000, 5001, 5002, 5003], [True] * 6 + [False]),  # refills to capacity, no more
    ],
)
def test_restart_budget(takes_at: list[float], expected: list[bool]) -> None:
    budget = RestartBudget.full(3, 600.0, 0.0)
    allowed = []
    for now in takes_at:
        ok_, budget = budget.take(now)
        allowed.append(ok_)
    assert allowed == expected


def test_restart_budget_says_when_the_next_restart_is_due() -> None:
    budget = RestartBudget.full(1, 600.0, 0.0)
    _, budget = budget.take(100.0)
    assert budget.seconds_until_next(100.0) == pytest.approx(600.0)
    assert budget.seconds_until_next(400.0) == pytest.approx(300.0)
    assert budget.seconds_until_next(700.0) == 0.0
    with pytest.raises(ValueError):
        RestartBudget(capacity=0)


class DeadServer:
    """A ManagedServer whose process is gone and whose first restarts fail."""

    def __init__(self, failing_restarts: int) -> None:
        self.alive = False
        self.failing = failing_restarts
        self.restarts = 0

    async def restart(self) -> None:
        self.restarts += 1
        if self.restarts <= self.failing:
            raise RuntimeError("no GPU")
        self.alive = True


def test_supervisor_waits_for_the_budget_instead_of_giving_up() -> None:
    asyncio.run(supervise_a_server_that_will_not_start())


async def supervise_a_server_that_will_not_start() -> None:
    clock = FakeClock()
    server = DeadServer(failing_restarts=3)
    config = WatchdogConfig(interval_seconds=1.0, restart_capacity=2, restart_refill_seconds=100.0)
    async with httpx.AsyncClient() as http:  # never used: a dead server is not probed
        supervisor = Supervisor(server, root_url="http://127.0.0.1:1", http=http, clock=clock,
                                config=config)
        task = asyncio.create_task(supervisor.run())
        await settle()
        await clock.advance(1.0)          # detected dead at t=1; two restarts fail at once
        assert server.restarts == 2 and supervisor.recoveries == []
        await clock.advance(98.0)         # t=99: still no token
        assert server.restarts == 2
        await clock.advance(2.0)          # t=101: one token back, third restart fails
        assert server.restarts == 3
        await clock.advance(100.0)        # t=201: fourth restart succeeds
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert server.restarts == 4
    [recovery] = supervisor.recoveries
    assert recovery.condition is Condition.DEAD and recovery.attempts == 4
    assert recovery.detected_at == 1.0 and recovery.recovered_at == pytest.approx(201.0)
