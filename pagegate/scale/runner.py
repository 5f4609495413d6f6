"""Run a plan's shards: launch a bounded number at a time, watch them, retry the dead ones.

The loop behind the `ocr-planner` flow, over two injected dependencies: a `Clock` and
`ShardRuns`, the four calls it makes to the orchestrator (tasks/shard_runs.py makes them
to Prefect; tests use a fake). The clock must tell the time the orchestrator's
timestamps are in: the flow passes a WallClock (epoch seconds), tests a FakeClock.
Each verdict on a run comes from pagegate.scale.watch; this module only acts on them.

Outcomes are returned in the order the shards reached a final verdict.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pagegate.clock import Clock
from pagegate.config import PlannerConfig
from pagegate.scale.plan import PlannedShard
from pagegate.scale.summary import ShardOutcome
from pagegate.scale.watch import RunView, Verdict, judge, launch_slots

log = logging.getLogger("pagegate.planner")


@dataclass(frozen=True)
class LaunchedRun:
    """The run a shard was given (a new one, or the one its idempotency key named)."""

    id: str
    name: str


@dataclass(frozen=True)
class RunState:
    """One read of a shard run. Times are epoch seconds."""

    name: str
    state_type: str        # Prefect StateType value: SCHEDULED, PENDING, RUNNING, ...
    state_since: float     # when it entered that state
    created: float | None  # when the run was created; None: unknown
    message: str = ""


class ShardRuns(Protocol):
    """The orchestrator's side of running shards."""

    async def launch(self, shard: PlannedShard) -> LaunchedRun:
        """Start the shard's run, or get back the one it already has."""
        ...

    async def read(self, ids: Sequence[str]) -> Mapping[str, RunState]:
        """The current state of these runs (a run not found is left out)."""
        ...

    async def last_heartbeat(self, run_id: str, window_seconds: float) -> float | None:
        """The run's newest heartbeat within the last `window_seconds`, or None."""
        ...

    async def force_retry(self, run_id: str, reason: str) -> None:
        """Send the same run back to the pool (what the UI's Retry does)."""
        ...


@dataclass
class _Active:
    """A shard whose run is not final yet, and what this planner did to it."""

    shard: PlannedShard
    retries: int = 0


def heartbeat_window(stale_after: float | None) -> float:
    """How far back heartbeats are read: twice the staleness limit, two minutes at least."""
    return max(120.0, 2 * (stale_after or 0.0))


def run_view(run: RunState, heartbeat: float | None, *, started: float, retried: bool) -> RunView:
    """The verdict's input. A run created before this planner started is `preexisting`
    (found by its idempotency key), unless this planner retried it: then it is its own."""
    preexisting = not retried and run.created is not None and run.created < started
    return RunView(run.state_type, run.state_since, heartbeat, preexisting)


def retry_reason(view: RunView, stale_after: float | None) -> str:
    reason = f"pagegate planner: shard run was {view.state_type.lower()}"
    if view.state_type in ("RUNNING", "PENDING"):
        reason += f", no sign of life for {stale_after or 0:.0f} s"
    return reason


async def run_shards(
    shards: Sequence[PlannedShard],
    runs: ShardRuns,
    clock: Clock,
    config: PlannerConfig,
    *,
    started: float,
    logger: logging.Logger | logging.LoggerAdapter[Any] = log,
) -> list[ShardOutcome]:
    """Launch up to `config.max_running_shards` at a time, look at every active run each
    `poll_seconds`, retry crashed and dead runs up to `shard_retries` times, and return
    every shard's outcome. `started` (the clock's time) tells which runs preexisted."""
    stale_after = config.stale_after_seconds
    waiting = deque(shards)
    active: dict[str, _Active] = {}
    outcomes: list[ShardOutcome] = []
    while waiting or active:
        for _ in range(launch_slots(len(active), len(waiting), config.max_running_shards)):
            shard = waiting.popleft()
            launched = await runs.launch(shard)
            active[launched.id] = _Active(shard)
            logger.info("shard %s: flow run %s", shard.id, launched.name)
        seen = await runs.read(list(active))
        now = clock.now()
        for run_id, entry in list(active.items()):
            run = seen.get(run_id)
            if run is None:
                continue
            beat = None
            if stale_after and run.state_type == "RUNNING":
                beat = await runs.last_heartbeat(run_id, heartbeat_window(stale_after))
            view = run_view(run, beat, started=started, retried=entry.retries > 0)
            verdict = judge(view, now=now, stale_after=stale_after,
                            retries_left=config.shard_retries - entry.retries)
            if verdict is Verdict.WAIT:
                continue
            if verdict is Verdict.RETRY:
                reason = retry_reason(view, stale_after)
                logger.warning("retrying shard %s (%s): %s", entry.shard.id, run.name, reason)
                await runs.force_retry(run_id, reason)
                entry.retries += 1
                continue
            del active[run_id]
            outcomes.append(ShardOutcome(
                entry.shard, verdict.value, run_id, run.name, entry.retries, run.message
            ))
            logger.info("shard %s %s: %s", entry.shard.id, verdict.value, run.message)
        if active or waiting:
            await clock.sleep(config.poll_seconds)  # the next look at the shard runs
    return outcomes
