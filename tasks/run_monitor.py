"""The run's operator view, as the flow sees it: progress artifact, chart, plan and record.

`open_run_monitor` is entered by the ocr-pdfs flow once the groups are planned and the
run context is live. It writes the plan to `runs/<flow run id>/plan.json`, creates the
`ocr-progress` artifact, and runs `pagegate.report.progress.monitor` beside the groups: a
sample every second for the chart and the terminal display, an artifact update at most
every 5 s (each update is an API call; the UI polls anyway). `finish` publishes the
final sample (100 %), draws the chart and writes the run record. Nothing here may fail
the run: workspace and API errors are logged and the run goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect.artifacts import (
    acreate_image_artifact,
    acreate_progress_artifact,
    aupdate_progress_artifact,
)

from pagegate.clock import Clock
from pagegate.io.local import LocalStore
from pagegate.io.s3 import S3Store
from pagegate.io.store import Store, split_s3_uri
from pagegate.ocr.outcomes import GroupOutcome, RunTotals
from pagegate.ocr.run import RunContext
from pagegate.plan.groups import Group
from pagegate.report.chart import render_run_chart
from pagegate.report.progress import (
    PROGRESS_LISTENER,
    PlanProgress,
    ProgressSample,
    ProgressSink,
    ProgressUpdate,
    Throttle,
    Timeline,
    monitor,
    progress_line,
    publish,
    take_sample,
)
from pagegate.report.records import (
    CHART_NAME,
    PLAN_NAME,
    RECORD_NAME,
    RunPlan,
    plan_to_json,
    record_to_json,
    run_key,
)

log = logging.getLogger("pagegate.progress")

PROGRESS_ARTIFACT_KEY = "ocr-progress"
CHART_LINK_SECONDS = 7 * 24 * 3600  # S3 presigned URLs live at most 7 days (SigV4)


@dataclass(frozen=True)
class RunReport:
    """What the summary needs from the monitor once the groups are done."""

    run_id: str
    final: ProgressUpdate
    chart_uri: str | None     # where the PNG is (s3://... or a local path)
    chart_link: str | None    # something a browser opens: presigned https, or file://


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


class RunMonitor:
    """Samples the run for progress and the chart; told by the flow when a group returns."""

    def __init__(
        self, ctx: RunContext, groups: Sequence[Group], run_id: str, sinks: Sequence[ProgressSink]
    ) -> None:
        self.ctx = ctx
        self.run_id = run_id
        self.sinks = list(sinks)
        self.plan = PlanProgress(
            groups_planned=len(groups),
            pdfs_planned=sum(len(g) for g in groups),
            pages_planned=sum(g.pages for g in groups),
        )
        self.timeline = Timeline()
        self.started_at = datetime.now(UTC)

    def sample(self) -> ProgressSample:
        return take_sample(self.ctx.stats, self.plan, _snapshot(self.ctx), self.ctx.clock.now())

    def group_finished(self, group: Group, outcome: GroupOutcome) -> None:
        ocr_pages = sum(p.pages for p in outcome.pdfs if p.status == "ok")
        self.plan.group_finished(group.pages, ocr_pages)

    async def finish(self, totals: RunTotals, elapsed_seconds: float) -> RunReport:
        """Publish the final sample, then save the chart and the run record."""
        final = await publish(self.sample(), self.sinks, self.timeline, final=True)
        store = self.ctx.workspace.store
        chart_key = run_key(self.run_id, CHART_NAME)
        chart_uri: str | None = None
        chart_link: str | None = None
        try:
            png = await asyncio.to_thread(
                # A copy: the sampler keeps appending while the chart is drawn in a thread.
                render_run_chart, tuple(self.timeline.samples), title=f"pagegate run {self.run_id}"
            )
            await asyncio.to_thread(store.write_bytes, chart_key, png)
            chart_uri = store.uri_for(chart_key)
            chart_link = await asyncio.to_thread(browser_link, store, chart_key)
        except Exception:
            log.warning("could not save the run chart", exc_info=True)
        record = self._record(totals, elapsed_seconds, final, chart_uri)
        await _write(store, run_key(self.run_id, RECORD_NAME), record_to_json(record), "run record")
        if chart_link and chart_link.startswith("https://"):
            with contextlib.suppress(Exception):
                await acreate_image_artifact(chart_link, key="ocr-run-chart",
                                             description="server queue, in-flight pages, releases")
        return RunReport(self.run_id, final, chart_uri, chart_link)

    def _record(
        self, totals: RunTotals, elapsed: float, final: ProgressUpdate, chart_uri: str | None
    ) -> dict[str, Any]:
        s = final.sample
        tokens = totals.input_tokens + totals.output_tokens
        return {
            "run_id": self.run_id,
            "run_count": _flow_run_count(),
            "sources": list(self.ctx.config.sources),
            "workspace": self.ctx.workspace.uri,
            "started_at": self.started_at.isoformat(timespec="seconds"),
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "elapsed_seconds": round(elapsed, 3),
            "pdfs_planned": s.pdfs_planned,
            "pages_planned": s.pages_planned,
            "pdfs_ok": totals.pdfs_ok,
            "pdfs_failed": totals.pdfs_failed,
            "pdfs_skipped": totals.pdfs_skipped,
            "pages": totals.pages,
            "fallback_pages": totals.fallback_pages,
            "input_tokens": totals.input_tokens,
            "output_tokens": totals.output_tokens,
            "pages_per_second": round(totals.pages / elapsed, 3) if elapsed > 0 else 0.0,
            "tokens_per_second": round(tokens / elapsed, 1) if elapsed > 0 else 0.0,
            "gate_releases": s.releases,
            "gate_pauses": s.pauses,
            "chart": chart_uri,
        }


@asynccontextmanager
async def open_run_monitor(
    ctx: RunContext,
    groups: Sequence[Group],
    *,
    sample_interval: float = 1.0,
    artifact_interval: float = 5.0,
) -> AsyncIterator[RunMonitor]:
    """Record the plan, start reporting progress, and stop reporting on exit."""
    run_id = _flow_run_id()
    plan = RunPlan(run_id, datetime.now(UTC).isoformat(timespec="seconds"),
                   tuple(ctx.config.sources), tuple(groups))
    await _write(ctx.workspace.store, run_key(run_id, PLAN_NAME), plan_to_json(plan), "run plan")
    sinks: list[ProgressSink] = []
    try:
        artifact_id = await acreate_progress_artifact(
            0.0, key=PROGRESS_ARTIFACT_KEY, description="pages settled / planned"
        )
        sinks.append(ProgressArtifactSink(artifact_id, ctx.clock, artifact_interval))
    except Exception:
        log.warning("could not create the progress artifact", exc_info=True)
    listener = PROGRESS_LISTENER.get()
    if listener is not None:
        sinks.append(listener)
    run_monitor = RunMonitor(ctx, groups, run_id, sinks)
    task = asyncio.create_task(
        monitor(run_monitor.sample, sinks, run_monitor.timeline, ctx.clock, interval=sample_interval),
        name="pagegate-progress",
    )
    try:
        yield run_monitor
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def browser_link(store: Store, key: str) -> str | None:
    """A link a browser can open: a presigned GET for S3, file:// for a local workspace."""
    if isinstance(store, LocalStore):
        return Path(store.uri_for(key)).as_uri()
    if isinstance(store, S3Store):
        bucket, full_key = split_s3_uri(store.uri_for(key))
        url: str = store.client.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": full_key}, ExpiresIn=CHART_LINK_SECONDS
        )
        return url
    return None


async def _write(store: Store, key: str, data: bytes, what: str) -> None:
    try:
        await asyncio.to_thread(store.write_bytes, key, data)
    except Exception:
        log.warning("could not write the %s to %s", what, key, exc_info=True)


def _snapshot(ctx: RunContext) -> dict[str, Any]:
    try:
        return ctx.admission.snapshot()
    except Exception:
        return {}


def _flow_run_id() -> str:
    """The Prefect flow run id; a fresh id when called outside a flow run."""
    from prefect.runtime import flow_run

    return str(flow_run.id or uuid.uuid4())


def _flow_run_count() -> int | None:
    from prefect.runtime import flow_run

    count = flow_run.run_count
    return int(count) if isinstance(count, int) else None
