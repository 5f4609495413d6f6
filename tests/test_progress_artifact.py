"""The progress artifact sink against a real Prefect API: throttled updates, final always."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from pagegate.clock import FakeClock
from pagegate.ocr.stats import RunStats
from pagegate.report.progress import PlanProgress, progress_update, take_sample
from pagegate.tasks.run_monitor import ProgressArtifactSink

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("prefect_api"),
    # the artifact is made outside a flow run here; in the flow it belongs to the run
    pytest.mark.filterwarnings("ignore:Artifact creation outside:FutureWarning"),
]


def test_artifact_follows_updates_at_most_every_interval_and_always_at_the_end() -> None:
    from prefect.artifacts import acreate_progress_artifact
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterId

    async def scenario() -> list[tuple[float, str]]:
        clock = FakeClock()
        artifact_id = await acreate_progress_artifact(0.0, key="test-progress")
        sink = ProgressArtifactSink(artifact_id, clock, interval=5.0)
        plan = PlanProgress(groups_planned=2, pdfs_planned=4, pages_planned=100)
        seen: list[tuple[float, str]] = []

        async def push(pages: int, *, final: bool = False) -> None:
            sample = take_sample(RunStats(started_at=0.0, pages_done=pages), plan, {}, clock.now())
            await sink(replace(progress_update(sample, []), final=final))
            async with get_client() as client:
                [artifact] = await client.read_artifacts(
                    artifact_filter=ArtifactFilter(id=ArtifactFilterId(any_=[artifact_id]))
                )
            seen.append((float(str(artifact.data)), artifact.description or ""))

        await push(10)                 # t=0: first update goes out
        await clock.advance(1.0)
        await push(20)                 # t=1: inside the interval, held back
        await clock.advance(5.0)
        await push(30)                 # t=6: due again
        await clock.advance(0.5)
        await push(40, final=True)     # final: always
        return seen

    seen = asyncio.run(scenario())

    assert [p for p, _ in seen] == [10.0, 10.0, 30.0, 40.0]
    assert seen[0][1].startswith("10/100 pages converted (10%)")
    assert seen[-1][1].startswith("40/100 pages converted (40%)")
