"""The `ocr-pdfs` flow: plan groups, fan them out as tasks, gate the pages, report.

Orchestration only. Everything it calls is a plain pagegate module or a thin task over
one. The runtime objects (HTTP client, admission gate, pdfium thread) are built here,
in the flow's own event loop, and shared by every group task through a context
variable; group tasks are awaited directly (not `.submit()`ed to a thread pool, which
would give each task its own loop and break the shared gate: see the Prefect notes).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from prefect import State, flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact
from prefect.states import Completed, Failed

from pagegate.admission.base import Admission
from pagegate.clock import MonotonicClock
from pagegate.config import RunConfig
from pagegate.outcomes import GroupOutcome, RunTotals
from pagegate.run_context import open_run_context
from pagegate.summary import failure_rows, summary_markdown
from tasks.admission_factory import open_admission
from tasks.ocr_group import ocr_group, plan_groups_task
from tasks.run_context_var import RUN_CONTEXT


@flow(name="ocr-pdfs")
async def ocr_pdfs(
    sources: list[str],
    workspace: str,
    server_url: str = "http://127.0.0.1:8000/v1",
    model: str = "olmocr",
    pages_per_group: int = 500,
    workers: int = 20,
    max_concurrent_requests: int = 1600,
    markdown: bool = False,
    target_longest_image_dim: int = 1288,
    max_page_retries: int = 8,
    gate: str | None = None,
    gate_enabled: bool = True,
    gate_overrides: dict[str, Any] | None = None,
) -> State[Any]:
    """OCR PDFs from S3 or disk into Dolma JSONL in WORKSPACE.

    Args:
        sources: s3://bucket/prefix, s3 globs, local folders, globs, or .txt lists of those.
        workspace: where results/, markdown/ and ledger/ go (local path or s3://bucket/prefix).
        server_url: the OpenAI-compatible base URL of the vLLM server, e.g. http://host:8000/v1.
        model: the served model name sent in each request.
        pages_per_group: target pages per group task.
        workers: group tasks running at once.
        max_concurrent_requests: cap on page requests in flight when the gate is disabled.
        markdown: also write one .md per PDF under markdown/.
        target_longest_image_dim: rendered page size, longest side in pixels.
        max_page_retries: model attempts per page before falling back to the PDF's text.
        gate: name of a saved AdmissionGate block; defaults apply when empty.
        gate_enabled: use the admission gate (off: a fixed cap of max_concurrent_requests).
        gate_overrides: AdmissionGate fields to override, e.g. {"cooldown_seconds": 10}.
    """
    logger = get_run_logger()
    config = RunConfig(
        sources=tuple(sources),
        workspace=workspace,
        server_url=server_url,
        model=model,
        pages_per_group=pages_per_group,
        workers=workers,
        max_concurrent_requests=max_concurrent_requests,
        markdown=markdown,
        target_longest_image_dim=target_longest_image_dim,
        max_page_retries=max_page_retries,
        gate_block=gate,
        gate_overrides=dict(gate_overrides or {}),
        use_gate=gate_enabled,
    )
    groups = await plan_groups_task(list(config.sources), config.pages_per_group)
    logger.info(
        "planned %d groups, %d PDFs, %d pages",
        len(groups), sum(len(g) for g in groups), sum(g.pages for g in groups),
    )
    clock = MonotonicClock()
    async with (
        httpx.AsyncClient(limits=httpx.Limits(max_connections=None, max_keepalive_connections=64)) as http,
        open_admission(config, http=http, clock=clock) as admission,
        open_run_context(config, admission, http=http, clock=clock) as ctx,
    ):
        token = RUN_CONTEXT.set(ctx)
        try:
            outcomes = await _run_groups(groups, config.workers)
        finally:
            RUN_CONTEXT.reset(token)
        elapsed = clock.now() - ctx.stats.started_at
        gate_state = _snapshot(admission)

    totals = RunTotals.of(outcomes)
    await acreate_markdown_artifact(
        key="ocr-run-summary",
        markdown=summary_markdown(totals, elapsed_seconds=elapsed, gate=gate_state),
        description="pagegate run summary",
    )
    summary = {
        "pdfs_ok": totals.pdfs_ok,
        "pdfs_failed": totals.pdfs_failed,
        "pdfs_skipped": totals.pdfs_skipped,
        "pages": totals.pages,
        "fallback_pages": totals.fallback_pages,
        "input_tokens": totals.input_tokens,
        "output_tokens": totals.output_tokens,
        "elapsed_seconds": round(elapsed, 3),
        "failed": [{"source": f.uri, "reason": f.reason, "detail": f.detail} for f in totals.failures],
    }
    if totals.failures:
        await acreate_table_artifact(
            key="ocr-failed-pdfs",
            table=failure_rows(totals.failures),
            description="PDFs that could not be processed, with reasons",
        )
        names = ", ".join(f.uri for f in totals.failures[:20])
        more = f" (+{len(totals.failures) - 20} more)" if len(totals.failures) > 20 else ""
        logger.error("%d PDF(s) failed: %s%s", len(totals.failures), names, more)
        return Failed(message=f"{len(totals.failures)} PDF(s) failed: {names}{more}", data=summary)
    return Completed(message=f"{totals.pdfs_ok} PDF(s) done, {totals.pages} pages", data=summary)


async def _run_groups(groups: list[Any], workers: int) -> list[GroupOutcome]:
    """Await one task per group, at most `workers` at a time, in this event loop."""
    limit = asyncio.Semaphore(workers)

    async def one(group: Any) -> GroupOutcome:
        async with limit:
            return await ocr_group(group)

    return list(await asyncio.gather(*(one(g) for g in groups)))


def _snapshot(admission: Admission) -> dict[str, Any]:
    try:
        return admission.snapshot()
    except Exception:  # a summary must not fail the run
        return {}
