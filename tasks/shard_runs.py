"""The planner's calls to the Prefect API: start shard runs, look at them, retry them.

`PrefectShardRuns` is pagegate.scale.runner's `ShardRuns` over a Prefect client: one
API call per method, every decision in pagegate.scale.runner and pagegate.scale.watch.
"""

from __future__ import annotations

from collections.abc import Sequence
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
from pagegate.scale.runner import LaunchedRun, RunState
from pagegate.scale.shards import shard_run_key

HEARTBEAT_EVENT = "prefect.flow-run.heartbeat"  # emitted by the flow engine (prefect/flow_engine.py)


class PrefectShardRuns:
    """Shard runs as runs of one deployment, all committing into one workspace."""

    def __init__(
        self,
        client: PrefectClient,
        *,
        deployment: str,
        workspace: str,
        parameters: dict[str, Any],
        salt: str,
    ) -> None:
        self.client = client
        self.deployment = deployment
        self.workspace = workspace
        self.parameters = parameters
        self.salt = salt

    async def launch(self, shard: PlannedShard) -> LaunchedRun:
        """Create the shard's flow run, or get back the one its idempotency key already names.

        `timeout=0`: return at once, the planner watches all runs itself. As a subflow of
        the planner, so the UI shows the shards under it.
        """
        run = await arun_deployment(
            self.deployment,
            parameters={**self.parameters, "sources": [shard.manifest], "workspace": self.workspace},
            flow_run_name=f"shard-{shard.index:05d}-{shard.id}",
            idempotency_key=shard_run_key(self.workspace, shard.id, self.salt),
            tags=["pagegate", "shard"],
            timeout=0,
            as_subflow=True,
        )
        return LaunchedRun(str(run.id), run.name)

    async def read(self, ids: Sequence[str]) -> dict[str, RunState]:
        if not ids:
            return {}
        runs = await self.client.read_flow_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[UUID(i) for i in ids])),
            limit=len(ids),
        )
        return {str(run.id): run_state(run) for run in runs}

    async def last_heartbeat(self, run_id: str, window_seconds: float) -> float | None:
        """Epoch seconds of the run's newest heartbeat within the window, or None."""
        since = datetime.now(UTC) - timedelta(seconds=window_seconds)
        page = await self.client.read_events(
            filter=EventFilter(
                occurred=EventOccurredFilter.model_validate({"since": since}),
                event=EventNameFilter(name=[HEARTBEAT_EVENT]),
                resource=EventResourceFilter(id=[f"prefect.flow-run.{run_id}"]),
            ),
            limit=1,
        )
        return page.events[0].occurred.timestamp() if page.events else None

    async def force_retry(self, run_id: str, reason: str) -> None:
        """What the UI's Retry does: the same run, forced to AwaitingRetry, for any worker."""
        await self.client.set_flow_run_state(UUID(run_id), AwaitingRetry(message=reason), force=True)


def run_state(run: FlowRun) -> RunState:
    """A flow run as the planner reads it; a run without a state yet is SCHEDULED."""
    created = run.created.timestamp() if run.created is not None else None
    state = run.state
    if state is None:
        return RunState(run.name, "SCHEDULED", created or 0.0, created)
    return RunState(run.name, state.type.value, state.timestamp.timestamp(), created,
                    state.message or "")
