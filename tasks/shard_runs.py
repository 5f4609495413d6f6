"""The planner's calls to the Prefect API: start shard runs, look at them, retry them.

Thin I/O over the client; every decision is in pagegate.scale.watch.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from prefect.client.orchestration import PrefectClient
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.client.schemas.objects import FlowRun
from prefect.deployments import arun_deployment
from prefect.events.filters import (
    EventFilter,
    EventNameFilter,
    EventOccurredFilter,
    EventResourceFilter,
)
from prefect.states import AwaitingRetry

from pagegate.scale.plan import PlannedShard
from pagegate.scale.shards import shard_run_key
from pagegate.scale.watch import RunView

HEARTBEAT_EVENT = "prefect.flow-run.heartbeat"  # emitted by the flow engine (prefect/flow_engine.py)


async def launch_shard(
    deployment: str,
    shard: PlannedShard,
    *,
    workspace: str,
    parameters: dict[str, Any],
    salt: str,
) -> FlowRun:
    """Create the shard's flow run, or get back the one its idempotency key already names.

    `timeout=0`: return at once, the planner watches all runs itself. As a subflow of the
    planner, so the UI shows the shards under it.
    """
    return await arun_deployment(
        deployment,
        parameters={**parameters, "sources": [shard.manifest], "workspace": workspace},
        flow_run_name=f"shard-{shard.index:05d}-{shard.id}",
        idempotency_key=shard_run_key(workspace, shard.id, salt),
        tags=["pagegate", "shard"],
        timeout=0,
        as_subflow=True,
    )


async def read_runs(client: PrefectClient, ids: list[UUID]) -> dict[UUID, FlowRun]:
    if not ids:
        return {}
    runs = await client.read_flow_runs(
        flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)), limit=len(ids)
    )
    return {run.id: run for run in runs}


async def last_heartbeat(client: PrefectClient, run_id: UUID, window_s: float) -> float | None:
    """Epoch seconds of the run's newest heartbeat within the window, or None."""
    since = datetime.now(UTC) - timedelta(seconds=window_s)
    page = await client.read_events(
        filter=EventFilter(
            occurred=EventOccurredFilter.model_validate({"since": since}),
            event=EventNameFilter(name=[HEARTBEAT_EVENT]),
            resource=EventResourceFilter(id=[f"prefect.flow-run.{run_id}"]),
        ),
        limit=1,
    )
    return page.events[0].occurred.timestamp() if page.events else None


def run_view(run: FlowRun, heartbeat: float | None, *, planner_started: float) -> RunView:
    """The planner's view of a run; `planner_started` in epoch seconds."""
    created = run.created.timestamp() if run.created is not None else planner_started
    state = run.state
    return RunView(
        state_type=state.type.value if state is not None else "SCHEDULED",
        state_since=state.timestamp.timestamp() if state is not None else created,
        last_heartbeat=heartbeat,
        preexisting=created < planner_started,
    )


async def force_retry(client: PrefectClient, run_id: UUID, reason: str) -> None:
    """What the UI's Retry does: the same run, forced to AwaitingRetry, for any worker."""
    await client.set_flow_run_state(run_id, AwaitingRetry(message=reason), force=True)
