"""The `ocr-pdfs` flow: plan groups, fan them out as tasks, gate the pages, report.

Orchestration only. Everything it calls is a plain pagegate module or a thin task over
one. The runtime objects (HTTP client, admission gate, pdfium thread) are built here,
in the flow's own event loop, and shared by every group task through a context
variable; group tasks are awaited directly (not `.submit()`ed to a thread pool, which
would give each task its own loop and break the shared gate: Prefect's ThreadPoolTaskRunner
runs each async task under `asyncio.run`, prefect/task_runners.py).

Retry: the plan and every group persist their results under keys tied to this flow
run (tasks/ocr_group.py). A group with a failed PDF ends Failed, the flow ends Failed
with a table of the failed PDFs, and Retry in the UI (the same run, forced to
AwaitingRetry) gets the plan and the finished groups from the cache, re-runs only the
failed groups, and inside them skips every PDF already committed to the workspace.
"""

# No `from __future__ import annotations`: Prefect builds the parameter model from these
# annotations, and a served run may see the function without its module's globals.
import asyncio
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
from prefect import State, flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact
from prefect.blocks.system import Secret
from prefect.runtime import flow_run
from prefect.states import Completed, Failed
from pydantic import SecretStr

from pagegate.admission.base import Admission
from pagegate.clock import MonotonicClock
from pagegate.config import RunConfig
from pagegate.ocr.outcomes import GroupOutcome, PdfOutcome, RunTotals
from pagegate.ocr.run import open_run_context, open_run_server
from pagegate.plan.groups import Group
from pagegate.plan.pending import PendingPlan
from pagegate.report.summary import failure_rows, summary_markdown
from pagegate.server.target import node_server_url
from tasks.admission_block import AdmissionGate
from tasks.admission_factory import managed_server_for, open_admission
from tasks.gate_param import gate_block_name
from tasks.ocr_group import group_outcome, ocr_group, plan_pending_task
from tasks.result_storage import resolve_result_storage
from tasks.run_context_var import RUN_CONTEXT
from tasks.run_monitor import open_run_monitor


@flow(name="ocr-pdfs")
async def ocr_pdfs(
    sources: list[str],
    workspace: str,
    server_url: str | None = None,
    model: str = "olmocr",
    pages_per_group: int = 500,
    workers: int = 20,
    max_concurrent_requests: int = 1600,
    markdown: bool = False,
    target_longest_image_dim: int = 1288,
    max_page_retries: int = 8,
    gate: AdmissionGate | str | None = None,
    gate_enabled: bool = True,
    gate_overrides: dict[str, Any] | None = None,
    max_pages_per_pdf: int | None = None,
    max_page_error_rate: float = 0.004,
    drop_on_page_errors: bool = False,
    pdf_password: SecretStr | None = None,
    pdf_password_secret: str | None = None,
    server_unavailable_after_seconds: float = 1800.0,
    s3_retry_mode: str = "standard",
    result_storage: str | None = None,
    launch_server: dict[str, Any] | None = None,
    server_urls: list[str] | None = None,
    capacity_backoff_max_seconds: float = 30.0,
) -> State[Any]:
    """OCR PDFs from S3 or disk into Dolma JSONL in WORKSPACE.

    Args:
        sources: s3://bucket/prefix, s3 globs, local folders, globs, or .txt lists of those.
        workspace: where results/, markdown/ and ledger/ go (local path or s3://bucket/prefix).
        server_url: the OpenAI-compatible base URL of the vLLM server, e.g. http://host:8000/v1;
            empty: the node's own, PAGEGATE_SERVER_URL in the worker's environment, else
            http://127.0.0.1:8000/v1 (pagegate/server/target.py).
        model: the served model name sent in each request.
        pages_per_group: target pages per group task.
        workers: group tasks running at once.
        max_concurrent_requests: cap on page requests in flight when the gate is disabled.
        markdown: also write one .md per PDF under markdown/.
        target_longest_image_dim: rendered page size, longest side in pixels.
        max_page_retries: model attempts per page before falling back to the PDF's text.
        gate: a saved AdmissionGate block (a picker in the UI) or its name; empty: defaults.
        gate_enabled: use the admission gate (off: a fixed cap of max_concurrent_requests).
        gate_overrides: AdmissionGate fields to override, e.g. {"cooldown_seconds": 10}.
        max_pages_per_pdf: PDFs with more pages go to the ledger as `too_many_pages`.
        max_page_error_rate: a document with a larger share of fallback pages gets a
            `page_error_rate` ledger record (olmOCR: 1/250).
        drop_on_page_errors: such a document is not written (olmOCR's behaviour); by
            default it is written with its fallback pages flagged.
        pdf_password: password for encrypted PDFs (recorded masked; a UI retry cannot
            recover it, so deployments use pdf_password_secret).
        pdf_password_secret: name of a Prefect Secret block holding that password.
        server_unavailable_after_seconds: how long capacity errors may last before a
            PDF is recorded as `server_unavailable`.
        s3_retry_mode: botocore retry mode for S3, "standard" or "adaptive".
        result_storage: where task results persist for retries: s3://bucket/prefix, a
            local path, or a saved block "type/name"; empty: Prefect's default.
        launch_server: launch and supervise a vLLM server for this run instead of using
            server_url, e.g. {"model": "allenai/olmOCR-2-7B-1025-FP8", "port": 8000,
            "hang_after_seconds": 180, "restart_budget": 5} (pagegate/server/managed.py).
        server_urls: several servers (e.g. one per GPU), each behind its own gate; every
            page goes to the least-loaded one still answering. Given, it replaces server_url.
        capacity_backoff_max_seconds: longest (jittered) pause between retries of a page
            the server could not take; retries go on until server_unavailable_after_seconds.
    """
    params = dict(locals())  # the flat flow parameters, for flow_run_config
    config = await flow_run_config(params, sources=sources)
    storage = await resolve_result_storage(result_storage)
    planner = plan_pending_task.with_options(result_storage=storage) if storage else plan_pending_task
    plan = await planner(
        list(config.sources),
        config.pages_per_group,
        config.workspace,
        pdf_password=_secret(config.pdf_password),
        s3_retry_mode=config.s3_retry_mode,
    )
    return await execute_plan(config, plan, result_storage=storage)


async def flow_run_config(
    params: Mapping[str, Any], *, sources: Sequence[str], redo_flagged: bool = False
) -> RunConfig:
    """The run's RunConfig from a flow's flat parameters.

    `ocr-pdfs` and `reprocess` share their parameter names (flat, so the UI's run form
    stays simple); this is the one place those names become a RunConfig.
    """
    gate_block = gate_block_name(params["gate"])
    return RunConfig(
        sources=tuple(sources),
        workspace=params["workspace"],
        server_url=params["server_url"] or node_server_url(),
        model=params["model"],
        pages_per_group=params["pages_per_group"],
        workers=params["workers"],
        max_concurrent_requests=params["max_concurrent_requests"],
        markdown=params["markdown"],
        target_longest_image_dim=params["target_longest_image_dim"],
        max_page_retries=params["max_page_retries"],
        gate_block=gate_block,
        gate_overrides=dict(params["gate_overrides"] or {}),
        use_gate=params["gate_enabled"],
        max_pages_per_pdf=params["max_pages_per_pdf"],
        max_page_error_rate=params["max_page_error_rate"],
        drop_on_page_errors=params["drop_on_page_errors"],
        pdf_password=await resolve_password(params["pdf_password"], params["pdf_password_secret"]),
        server_unavailable_after_seconds=params["server_unavailable_after_seconds"],
        capacity_backoff_max_seconds=params["capacity_backoff_max_seconds"],
        server_urls=tuple(params["server_urls"] or ()),
        s3_retry_mode=params["s3_retry_mode"],
        redo_flagged=redo_flagged,
        run_id=flow_run.get_id(),
        managed_server=await managed_server_for(params["launch_server"], gate_block),
    )


async def resolve_password(password: SecretStr | None, secret_block: str | None) -> str | None:
    """The PDF password from the parameter or a Prefect Secret block; never logged."""
    if secret_block:
        block: Any = await Secret.aload(secret_block)
        if not isinstance(block, Secret):
            raise TypeError(f"block {secret_block!r} is not a Secret")
        return str(block.get())
    return password.get_secret_value() if password is not None else None


def _secret(password: str | None) -> SecretStr | None:
    return SecretStr(password) if password is not None else None


async def execute_plan(
    config: RunConfig, plan: PendingPlan, *, result_storage: str | Path | None
) -> State[Any]:
    """Run the planned groups under one admission gate, then report; the flow's final state.

    Shared by `ocr-pdfs` and `reprocess`; `result_storage` is already resolved
    (tasks/result_storage.py).
    """
    logger = get_run_logger()
    groups = list(plan.groups)
    logger.info(
        "planned %d groups, %d PDFs, %d pages; %d PDF(s) already done",
        len(groups), plan.pdfs, plan.pages, plan.already_done,
    )
    group_task = (
        ocr_group.with_options(result_storage=result_storage) if result_storage else ocr_group
    )
    clock = MonotonicClock()
    async with (
        httpx.AsyncClient(limits=httpx.Limits(max_connections=None, max_keepalive_connections=64)) as http,
        # A launched server is started and supervised here; config then points at it.
        open_run_server(config, http=http, clock=clock) as config,
        open_admission(config, http=http, clock=clock) as admission,
        open_run_context(config, admission, http=http, clock=clock) as ctx,
        open_run_monitor(ctx, groups) as monitor,
    ):
        token = RUN_CONTEXT.set(ctx)
        try:
            outcomes = await _run_groups(
                groups, config.workers, on_done=monitor.group_finished, task=group_task
            )
        finally:
            RUN_CONTEXT.reset(token)
        elapsed = clock.now() - ctx.stats.started_at
        gate_state = _snapshot(admission)
        report = await monitor.finish(RunTotals.of(outcomes), elapsed)

    totals = RunTotals.of(outcomes)
    await acreate_markdown_artifact(
        key="ocr-run-summary",
        markdown=summary_markdown(
            totals, elapsed_seconds=elapsed, gate=gate_state,
            chart_uri=report.chart_uri, chart_link=report.chart_link,
        ),
        description="pagegate run summary",
    )
    summary = {
        "pdfs_ok": totals.pdfs_ok,
        "pdfs_failed": totals.pdfs_failed,
        "pdfs_skipped": totals.pdfs_skipped + plan.already_done,
        "pages": totals.pages,
        "fallback_pages": totals.fallback_pages,
        "input_tokens": totals.input_tokens,
        "output_tokens": totals.output_tokens,
        "elapsed_seconds": round(elapsed, 3),
        "chart": report.chart_uri,
        "failed": [{"source": f.uri, "reason": f.reason, "detail": f.detail} for f in totals.failures],
        "flagged": [_row(p) for p in _flagged(outcomes)],
    }
    flagged = _flagged(outcomes)
    if flagged:
        logger.warning(
            "%d PDF(s) committed with fallback pages flagged (ledger: page_error_rate): %s",
            len(flagged), ", ".join(p.uri for p in flagged[:20]),
        )
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


def _flagged(outcomes: list[GroupOutcome]) -> list[PdfOutcome]:
    """Committed documents that got a page_error_rate record (done, but worth a reprocess)."""
    return [p for g in outcomes for p in g.pdfs if p.status == "ok" and p.reason]


def _row(pdf: PdfOutcome) -> dict[str, Any]:
    return {"source": pdf.uri, "reason": pdf.reason, "detail": pdf.detail}


async def _run_groups(
    groups: list[Group],
    workers: int,
    on_done: Callable[[Any, GroupOutcome], None] | None = None,
    task: Any = ocr_group,
) -> list[GroupOutcome]:
    """Await one task per group, at most `workers` at a time, in this event loop.

    Each task's final state is read whatever it is (completed, cached, failed with its
    PDFs recorded, crashed), so one group never hides the others' outcomes.
    """
    limit = asyncio.Semaphore(workers)

    async def one(group: Group) -> GroupOutcome:
        async with limit:
            state = await task(group, return_state=True)
            outcome = await group_outcome(state, group)
        if on_done is not None:
            on_done(group, outcome)  # progress accounting (tasks/run_monitor.py)
        return outcome

    return list(await asyncio.gather(*(one(g) for g in groups)))


def _snapshot(admission: Admission) -> dict[str, Any]:
    try:
        return admission.snapshot()
    except Exception:  # a summary must not fail the run
        return {}
