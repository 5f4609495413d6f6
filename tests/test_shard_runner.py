"""The planner's loop (pagegate.scale.runner) on a FakeClock and a scripted runs API.

No Prefect and no sleeps: each fake run follows a script of states over the seconds
since its attempt began, sends heartbeats while its script says so, and starts its
next attempt's script when the loop retries it. The test moves the clock one poll at
a time and reads what the loop did: launches, retries, outcomes in completion order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import pytest

from pagegate.clock import FakeClock, settle
from pagegate.config import PlannerConfig
from pagegate.scale.plan import PlannedShard
from pagegate.scale.runner import LaunchedRun, RunState, heartbeat_window, run_shards
from pagegate.scale.summary import ShardOutcome

START = 1_000.0
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "CRASHED"}


@dataclass(frozen=True)
class Attempt:
    states: tuple[tuple[float, str], ...]  # (seconds after the attempt began, state type)
    beats_until: float | None = None       # heartbeats (each second) stop here; None: never any


@dataclass
class _Run:
    shard: PlannedShard
    attempts: Sequence[Attempt]
    created: float
    began: float
    attempt: int = 0


@dataclass
class FakeRuns:
    """A runs API whose runs follow their scripts (see the module docstring)."""

    clock: FakeClock
    scripts: Mapping[str, Sequence[Attempt]]
    preexisting: frozenset[str] = frozenset()
    launches: list[tuple[float, str]] = field(default_factory=list)
    in_flight_at_launch: list[int] = field(default_factory=list)  # runs not final, the new one too
    retries: list[tuple[float, str, str]] = field(default_factory=list)
    runs: dict[str, _Run] = field(default_factory=dict)

    async def launch(self, shard: PlannedShard) -> LaunchedRun:
        now = self.clock.now()
        self.launches.append((now, shard.id))
        created = now - 3600 if shard.id in self.preexisting else now
        self.runs[shard.id] = _Run(shard, self.scripts[shard.id], created, began=now)
        self.in_flight_at_launch.append(
            sum(1 for r in self.runs.values() if self._state(r)[0] not in FINAL)
        )
        return LaunchedRun(shard.id, f"run-{shard.id}")

    def _state(self, run: _Run) -> tuple[str, float]:
        age = self.clock.now() - run.began
        current = ("SCHEDULED", 0.0)
        for at, state in run.attempts[run.attempt].states:
            if at <= age:
                current = (state, at)
        return current[0], run.began + current[1]

    async def read(self, ids: Sequence[str]) -> dict[str, RunState]:
        out = {}
        for run_id in ids:
            run = self.runs[run_id]
            state, since = self._state(run)
            out[run_id] = RunState(f"run-{run_id}", state, since, run.created, f"{state} {run_id}")
        return out

    async def last_heartbeat(self, run_id: str, window_seconds: float) -> float | None:
        run = self.runs[run_id]
        until = run.attempts[run.attempt].beats_until
        if until is None:
            return None
        last = run.began + min(self.clock.now() - run.began, until)
        return last if self.clock.now() - last <= window_seconds else None

    async def force_retry(self, run_id: str, reason: str) -> None:
        self.retries.append((self.clock.now(), run_id, reason))
        run = self.runs[run_id]
        run.attempt += 1
        run.began = self.clock.now()


def shard(i: int) -> PlannedShard:
    return PlannedShard(f"s{i}", i, pdfs=1, estimated_pages=10, bytes=100, manifest=f"m{i}.txt")


def done_after(seconds: float, state: str = "COMPLETED") -> Attempt:
    return Attempt(((0.5, "RUNNING"), (seconds, state)), beats_until=seconds)


async def drive(
    runs: FakeRuns, config: PlannerConfig, shards: Sequence[PlannedShard], *, limit: float = 3600
) -> list[ShardOutcome]:
    """Run the loop to its end, one poll interval of fake time at a time."""
    task = asyncio.create_task(
        run_shards(shards, runs, runs.clock, config, started=runs.clock.now())
    )
    await settle()
    while not task.done():
        assert runs.clock.now() - START < limit, "the loop did not finish"
        await runs.clock.advance(config.poll_seconds)
    return task.result()


def run_loop(
    scripts: Mapping[str, Sequence[Attempt]], config: PlannerConfig, *,
    preexisting: frozenset[str] = frozenset(),
) -> tuple[FakeRuns, list[ShardOutcome]]:
    async def scenario() -> tuple[FakeRuns, list[ShardOutcome]]:
        runs = FakeRuns(FakeClock(START), scripts, preexisting)
        shards = [shard(int(sid[1:])) for sid in scripts]
        return runs, await drive(runs, config, shards)

    return asyncio.run(scenario())


def summary(outcomes: Sequence[ShardOutcome]) -> list[tuple[str, str, int]]:
    return [(o.shard.id, o.verdict, o.retries) for o in outcomes]


def test_launches_fill_the_free_slots_and_outcomes_come_in_completion_order() -> None:
    scripts = {
        "s0": [done_after(2)], "s1": [done_after(40)], "s2": [done_after(1)],
        "s3": [done_after(1)], "s4": [done_after(1)],
    }
    runs, outcomes = run_loop(scripts, PlannerConfig(max_running_shards=2, poll_seconds=5))

    # t=0: two slots; s0 is done at the look at t=5 and s2 takes its slot at t=10, and so
    # on, while s1 holds the other slot until t=40.
    assert [(t - START, sid) for t, sid in runs.launches] == [
        (0, "s0"), (0, "s1"), (10, "s2"), (20, "s3"), (30, "s4")
    ]
    assert summary(outcomes) == [
        ("s0", "completed", 0), ("s2", "completed", 0), ("s3", "completed", 0),
        ("s4", "completed", 0), ("s1", "completed", 0),
    ]
    assert outcomes[0].flow_run_name == "run-s0" and outcomes[0].message == "COMPLETED s0"
    assert runs.retries == []


def test_never_more_runs_in_flight_than_allowed_and_every_slot_used() -> None:
    scripts = {f"s{i}": [done_after(1 + 7 * (i % 3))] for i in range(9)}
    runs, outcomes = run_loop(scripts, PlannerConfig(max_running_shards=3, poll_seconds=5))
    assert sorted(o.shard.id for o in outcomes) == sorted(scripts)
    assert max(runs.in_flight_at_launch) == 3


def test_a_crashed_shard_is_retried_and_then_finishes() -> None:
    scripts = {"s0": [Attempt(((1, "CRASHED"),)), done_after(3)]}
    runs, outcomes = run_loop(scripts, PlannerConfig(poll_seconds=5))
    assert [(t - START, sid, why) for t, sid, why in runs.retries] == [
        (5, "s0", "pagegate planner: shard run was crashed")
    ]
    assert summary(outcomes) == [("s0", "completed", 1)]


def test_a_running_shard_without_heartbeats_for_stale_after_is_dead_and_retried() -> None:
    # The node dies 10 s into the run: the run stays RUNNING, its heartbeats stop.
    node_dies = Attempt(((1, "RUNNING"),), beats_until=10)
    scripts = {"s0": [node_dies, done_after(20)]}
    config = PlannerConfig(stale_after_seconds=55, poll_seconds=5)
    runs, outcomes = run_loop(scripts, config)
    # last sign of life at t=10; dead once more than 55 s have passed: the look at t=70
    [(when, _, why)] = runs.retries
    assert when - START == 70
    assert why == "pagegate planner: shard run was running, no sign of life for 55 s"
    assert summary(outcomes) == [("s0", "completed", 1)]


def test_a_run_stuck_pending_is_dead_too() -> None:
    scripts = {"s0": [Attempt(((0, "PENDING"),)), done_after(2)]}
    runs, outcomes = run_loop(scripts, PlannerConfig(stale_after_seconds=30, poll_seconds=5))
    assert [t - START for t, _, _ in runs.retries] == [35]
    assert summary(outcomes) == [("s0", "completed", 1)]


def test_a_run_that_never_sent_a_heartbeat_is_not_judged() -> None:
    quiet = Attempt(((1, "RUNNING"), (300, "COMPLETED")), beats_until=None)
    runs, outcomes = run_loop({"s0": [quiet]}, PlannerConfig(stale_after_seconds=30))
    assert runs.retries == []
    assert summary(outcomes) == [("s0", "completed", 0)]


def test_no_staleness_limit_means_no_heartbeat_reads_and_no_dead_runs() -> None:
    node_dies = Attempt(((1, "RUNNING"), (400, "COMPLETED")), beats_until=5)
    runs, outcomes = run_loop({"s0": [node_dies]}, PlannerConfig(stale_after_seconds=None))
    assert runs.retries == []
    assert summary(outcomes) == [("s0", "completed", 0)]


def test_retries_run_out_and_the_shard_is_lost() -> None:
    crash = Attempt(((1, "CRASHED"),))
    runs, outcomes = run_loop({"s0": [crash, crash]}, PlannerConfig(shard_retries=1))
    assert len(runs.retries) == 1
    assert summary(outcomes) == [("s0", "lost", 1)]


def test_a_failed_run_is_recorded_unless_it_was_there_before_the_planner() -> None:
    failed = Attempt(((1, "FAILED"),))
    _, fresh = run_loop({"s0": [failed]}, PlannerConfig())
    assert summary(fresh) == [("s0", "failed", 0)]

    # Found by its idempotency key, failed from an earlier planner: retried once, then
    # judged as this planner's own run.
    runs, old = run_loop({"s0": [failed, failed]}, PlannerConfig(), preexisting=frozenset({"s0"}))
    assert len(runs.retries) == 1
    assert summary(old) == [("s0", "failed", 1)]


def test_cancelled_and_completed_shards_are_final_without_retries() -> None:
    scripts = {"s0": [done_after(2, "CANCELLED")], "s1": [done_after(2)]}
    runs, outcomes = run_loop(scripts, PlannerConfig())
    assert summary(outcomes) == [("s0", "cancelled", 0), ("s1", "completed", 0)]
    assert runs.retries == []


@pytest.mark.parametrize(("stale", "window"), [(None, 120.0), (30.0, 120.0), (180.0, 360.0)])
def test_heartbeats_are_read_over_twice_the_staleness_limit(
    stale: float | None, window: float
) -> None:
    assert heartbeat_window(stale) == window


def test_a_prefect_flow_run_becomes_a_run_state() -> None:
    from prefect.client.schemas.objects import FlowRun
    from prefect.states import Running

    from pagegate.tasks.shard_runs import run_state

    created: Any = datetime(2026, 1, 1, tzinfo=UTC)  # Prefect types it as its DateTime
    running: Any = Running(message="on node b")
    run = FlowRun(flow_id=uuid4(), name="shard-00001-s1", state=running, created=created)
    got = run_state(run)
    assert (got.name, got.state_type, got.message) == ("shard-00001-s1", "RUNNING", "on node b")
    assert got.created == created.timestamp()
    assert got.state_since == running.timestamp.timestamp()
    fresh = run_state(FlowRun(flow_id=uuid4(), name="n", created=created + timedelta(seconds=5)))
    assert (fresh.state_type, fresh.state_since) == ("SCHEDULED", created.timestamp() + 5)
