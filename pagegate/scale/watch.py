"""What the planner does with a shard's flow run on each look: wait, record, or retry it.

Pure: the planner reads the run's state and its last heartbeat from the Prefect API
(tasks/shard_runs.py) and acts on the verdict.

A dead worker leaves its run `Running` (or `Pending`, if it died while starting it) for
good: nobody is left to report a crash. Prefect's flow-run heartbeats tell: a run
sends one every PREFECT_FLOWS_HEARTBEAT_FREQUENCY seconds (set on every worker, at
least 30), so a run whose last sign of life is older than `stale_after` is dead. A
run that never sent a heartbeat cannot be judged (heartbeats may be off) and is
left alone. A `Crashed` run (its process died but its worker lived and said so) is
the same case, reported. Either is retried the way the UI's Retry does it: the same
flow run, forced to AwaitingRetry, taken by whichever worker is free. The retry skips
the PDFs the dead attempt had committed.

A `Failed` run has PDFs that failed for their own reasons (ledger records): retrying
at once would fail them again, so it is recorded, except when the run already existed
before this planner started (a planner rerun after a fix): that one is retried, once
per planner run, which redoes only its failed PDFs.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Verdict(StrEnum):
    WAIT = "wait"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    RETRY = "retry"
    LOST = "lost"  # crashed or dead, and no retries left


@dataclass(frozen=True)
class RunView:
    """What the planner knows about one shard run at one look. Times are epoch seconds."""

    state_type: str  # Prefect StateType value: SCHEDULED, PENDING, RUNNING, COMPLETED, ...
    state_since: float  # when the run entered its current state
    last_heartbeat: float | None = None
    preexisting: bool = False  # created before this planner run (found by idempotency key)


def is_dead(run: RunView, *, now: float, stale_after: float | None) -> bool:
    """Running without a heartbeat for `stale_after`, or stuck Pending that long."""
    if stale_after is None or stale_after <= 0:
        return False
    if run.state_type == "PENDING":
        return now - run.state_since > stale_after
    if run.state_type == "RUNNING" and run.last_heartbeat is not None:
        return now - max(run.last_heartbeat, run.state_since) > stale_after
    return False


def judge(
    run: RunView, *, now: float, stale_after: float | None, retries_left: int
) -> Verdict:
    """The planner's action for one look at a shard run (see the module docstring)."""
    kind = run.state_type
    if kind == "COMPLETED":
        return Verdict.COMPLETED
    if kind == "CANCELLED":
        return Verdict.CANCELLED
    if kind == "FAILED":
        return Verdict.RETRY if run.preexisting and retries_left > 0 else Verdict.FAILED
    if kind == "CRASHED" or is_dead(run, now=now, stale_after=stale_after):
        return Verdict.RETRY if retries_left > 0 else Verdict.LOST
    return Verdict.WAIT  # scheduled, pending, running, paused, cancelling: look again later


def launch_slots(active: int, waiting: int, max_running: int) -> int:
    """How many new shard runs to start now: fill up to `max_running`, no more than wait."""
    return max(0, min(waiting, max_running - active))
