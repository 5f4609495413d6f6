"""The run monitor's Prefect side: the `ocr-progress` and `ocr-run-summary` artifacts, the run id.

The monitor itself (samples, chart, run record) is pagegate.report.monitor. Here its
progress goes to a Prefect progress artifact, updated at most every 5 s (each update
is an API call; the UI polls anyway), and the run is named by its flow run's id, so a
UI retry rewrites its own `runs/<id>/` folder. At the end the summary artifact carries
the totals, the failed PDFs and the run chart inlined (pagegate.report.summary), so the
chart shows in the UI for a local workspace too. Nothing here may fail the run: API
errors are logged and the run goes on.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from prefect.artifacts import (
    acreate_markdown_artifact,
    acreate_progress_artifact,
    aupdate_progress_artifact,
)
from prefect.runtime import flow_run

from pagegate.clock import Clock
from pagegate.ocr.run import RunContext
from pagegate.plan.groups import Group
from pagegate.report.monitor import RunMonitor, RunReport, open_monitor
from pagegate.report.progress import ProgressSink, ProgressUpdate, Throttle, progress_line
from pagegate.report.summary import RunSummary, summary_markdown

log = logging.getLogger("pagegate.progress")

PROGRESS_ARTIFACT_KEY = "ocr-progress"
SUMMARY_ARTIFACT_KEY = "ocr-run-summary"


class ProgressArtifactSink:
    """Keeps one Prefect progress artifact current, at most once per `interval` seconds."""

    def __init__(self, artifact_id: Any, clock: Clock, interval: float) -> None:
        self.artifact_id = artifact_id
        self._clock = clock
        self._throttle = Throttle(interval)

    async def __call__(self, update: ProgressUpdate) -> None:
        if update.final or self._throttle.due(self._clock.now()):
            await aupdate_progress_artifact(
                self.artifact_id, update.percent, description=progress_line(update)
            )

    def __repr__(self) -> str:
        return f"ProgressArtifactSink({self.artifact_id})"


@asynccontextmanager
async def open_run_monitor(
    ctx: RunContext,
    groups: Sequence[Group],
    *,
    sample_interval: float = 1.0,
    artifact_interval: float = 5.0,
) -> AsyncIterator[RunMonitor]:
    """The run's monitor (pagegate.report.monitor), reporting into a progress artifact."""
    sinks: list[ProgressSink] = []
    try:
        artifact_id = await acreate_progress_artifact(
            0.0, key=PROGRESS_ARTIFACT_KEY, description="pages settled / planned"
        )
        sinks.append(ProgressArtifactSink(artifact_id, ctx.clock, artifact_interval))
    except Exception:
        log.warning("could not create the progress artifact", exc_info=True)
    count = flow_run.run_count
    async with open_monitor(
        ctx, groups, run_id=str(flow_run.id or uuid.uuid4()), sinks=sinks,
        run_count=int(count) if isinstance(count, int) else None,
        sample_interval=sample_interval,
    ) as run_monitor:
        yield run_monitor


async def create_summary_artifact(
    summary: RunSummary, report: RunReport, gate: Mapping[str, Any]
) -> None:
    """The run summary in the UI: totals, failed PDFs, the chart inlined, the gate's state."""
    markdown = summary_markdown(
        summary.totals, elapsed_seconds=summary.elapsed_seconds, gate=gate,
        chart_uri=report.chart_uri, chart_link=report.chart_link, chart_png=report.chart_png,
        already_done=summary.already_done,
    )
    try:
        await acreate_markdown_artifact(
            key=SUMMARY_ARTIFACT_KEY, markdown=markdown, description=summary.headline()
        )
    except Exception:
        log.warning("could not create the run summary artifact", exc_info=True)
