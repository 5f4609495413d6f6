"""The run's operator view: progress samples beside the groups, then the chart and the record.

`open_monitor` is entered once the groups are planned and the run context is live. It
writes the plan to `runs/<run id>/plan.json` and runs `pagegate.report.progress.monitor`
beside the groups: a sample every second for the chart and the sinks it is given (the
terminal display the CLI set in PROGRESS_LISTENER, the flow's progress artifact).
`RunMonitor.finish` publishes the final sample (100 %), draws the chart and writes the
run record. Nothing here may fail the run: workspace errors are logged and the run goes
on. The orchestrator's parts (the artifacts, the run's id) are the caller's
(tasks/run_monitor.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pagegate.io.s3 import S3Store
from pagegate.io.store import Store, split_s3_uri
from pagegate.ocr.outcomes import GroupOutcome, RunTotals
from pagegate.ocr.run import RunContext
from pagegate.plan.groups import Group
from pagegate.report.chart import draw_run_chart
from pagegate.report.progress import (
    PROGRESS_LISTENER,
    PlanProgress,
    ProgressSample,
    ProgressSink,
    ProgressUpdate,
    Timeline,
    monitor,
    progress_update,
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

CHART_LINK_SECONDS = 7 * 24 * 3600  # S3 presigned URLs live at most 7 days (SigV4)


@dataclass(frozen=True)
class RunReport:
    """What the summary needs from the monitor once the groups are done."""

    run_id: str
    final: ProgressUpdate
    chart_uri: str | None     # where the PNG is (s3://... or a local path)
    chart_link: str | None    # a presigned https URL for an S3 chart; None for a local one
    chart_png: bytes | None = None  # the chart itself, for the summary artifact to inline


def run_record(
    *,
    run_id: str,
    run_count: int | None,
    sources: Sequence[str],
    workspace: str,
    started_at: datetime,
    finished_at: datetime,
    totals: RunTotals,
    elapsed_seconds: float,
    final: ProgressSample,
    chart_uri: str | None,
) -> dict[str, Any]:
    """The run's `run.json` (pagegate.report.records), which `pagegate stats` reads."""
    elapsed = elapsed_seconds
    tokens = totals.input_tokens + totals.output_tokens
    return {
        "run_id": run_id,
        "run_count": run_count,
        "sources": list(sources),
        "workspace": workspace,
        "started_at": started_at.isoformat(timespec="seconds"),
        "finished_at": finished_at.isoformat(timespec="seconds"),
        "elapsed_seconds": round(elapsed, 3),
        "pdfs_planned": final.pdfs_planned,
        "pages_planned": final.pages_planned,
        "pdfs_ok": totals.pdfs_ok,
        "pdfs_failed": totals.pdfs_failed,
        "pdfs_skipped": totals.pdfs_skipped,
        "pages": totals.pages,
        "fallback_pages": totals.fallback_pages,
        "input_tokens": totals.input_tokens,
        "output_tokens": totals.output_tokens,
        "pages_per_second": round(totals.pages / elapsed, 3) if elapsed > 0 else 0.0,
        "tokens_per_second": round(tokens / elapsed, 1) if elapsed > 0 else 0.0,
        "gate_releases": final.releases,
        "gate_pauses": final.pauses,
        "chart": chart_uri,
    }


class RunMonitor:
    """Samples the run for progress and the chart; told by the flow when a group returns."""

    def __init__(
        self,
        ctx: RunContext,
        groups: Sequence[Group],
        run_id: str,
        sinks: Sequence[ProgressSink],
        *,
        run_count: int | None = None,
    ) -> None:
        self.ctx = ctx
        self.run_id = run_id
        self.run_count = run_count
        self.sinks = list(sinks)
        self.plan = PlanProgress(
            groups_planned=len(groups),
            pdfs_planned=sum(len(g) for g in groups),
            pages_planned=sum(g.pages for g in groups),
        )
        self.timeline = Timeline()
        self.started_at = datetime.now(UTC)
        self._told_scrape_error = False

    def sample(self) -> ProgressSample:
        snapshot = _snapshot(self.ctx)
        error = snapshot.get("last_scrape_error")
        if error and not self._told_scrape_error:
            # The gate starts paused for want of a reading, so its 'paused' warning never
            # comes for a server that is down from the start: say where and why here, once.
            log.warning("no reading from the server: %s", error)
            self._told_scrape_error = True
        return take_sample(self.ctx.stats, self.plan, snapshot, self.ctx.clock.now())

    def group_finished(self, group: Group, *outcomes: GroupOutcome) -> None:
        """A group is done: by this run, by another (pagegate.ocr.turns), or by both
        (one outcome each) when another run took it over."""
        for outcome in outcomes:
            if outcome.by is not None:
                self.ctx.stats.pdfs_by_others += outcome.tally.ok + sum(
                    p.status == "ok" for p in outcome.pdfs)
        self.plan.group_finished(group.pages, sum(o.ok_pages for o in outcomes))

    async def finish(self, totals: RunTotals, elapsed_seconds: float) -> RunReport:
        """Publish the final sample, then save the chart and the run record (not to a
        workspace that stopped taking writes: the run's own line says so)."""
        final = await publish(self.sample(), self.sinks, self.timeline, final=True)
        if self.ctx.halt.error is not None:
            return RunReport(self.run_id, final, None, None, None)
        store = self.ctx.workspace.store
        chart_key = run_key(self.run_id, CHART_NAME)
        chart_uri: str | None = None
        chart_link: str | None = None
        png: bytes | None = None
        try:
            png = await draw_run_chart(self.timeline.samples, title=f"pagegate run {self.run_id}")
            await asyncio.to_thread(store.write_bytes, chart_key, png)
            chart_uri = store.uri_for(chart_key)
            chart_link = await asyncio.to_thread(browser_link, store, chart_key)
        except Exception:
            log.warning("could not save the run chart", exc_info=True)
        record = run_record(
            run_id=self.run_id, run_count=self.run_count, sources=self.ctx.config.sources,
            workspace=self.ctx.workspace.uri, started_at=self.started_at,
            finished_at=datetime.now(UTC), totals=totals, elapsed_seconds=elapsed_seconds,
            final=final.sample, chart_uri=chart_uri,
        )
        await _write(store, run_key(self.run_id, RECORD_NAME), record_to_json(record), "run record")
        return RunReport(self.run_id, final, chart_uri, chart_link, png)


@asynccontextmanager
async def open_monitor(
    ctx: RunContext,
    groups: Sequence[Group],
    *,
    run_id: str,
    sinks: Sequence[ProgressSink] = (),
    run_count: int | None = None,
    sample_interval: float = 1.0,
) -> AsyncIterator[RunMonitor]:
    """Record the plan, start sampling into `sinks` (and PROGRESS_LISTENER), stop on exit."""
    plan = RunPlan(run_id, datetime.now(UTC).isoformat(timespec="seconds"),
                   tuple(ctx.config.sources), tuple(groups))
    await _write(ctx.workspace.store, run_key(run_id, PLAN_NAME), plan_to_json(plan), "run plan")
    listener = PROGRESS_LISTENER.get()
    all_sinks = [*sinks, *([listener] if listener is not None else [])]
    run_monitor = RunMonitor(ctx, groups, run_id, all_sinks, run_count=run_count)
    task = asyncio.create_task(
        monitor(run_monitor.sample, all_sinks, run_monitor.timeline, ctx.clock,
                interval=sample_interval),
        name="pagegate-progress",
    )
    try:
        yield run_monitor
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM, a crash): no next tick comes, so the in-process
        # listener (the CLI) gets the counters as they are now, for its partial summary.
        if listener is not None:
            await _last_word(listener, run_monitor.sample())
        raise
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _last_word(listener: ProgressSink, sample: ProgressSample) -> None:
    try:
        await listener(progress_update(sample, []))
    except Exception:  # the run is ending anyway; its own error is the one to see
        log.warning("progress listener failed on the last sample", exc_info=True)


def browser_link(store: Store, key: str) -> str | None:
    """A link a browser can open: a presigned GET for S3; None for a local workspace.

    A file:// link from the Prefect UI is dead: browsers do not open file: URLs from an
    http page, and the file is on the machine that ran the flow, not the operator's.
    """
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
