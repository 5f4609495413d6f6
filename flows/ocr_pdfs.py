"""The `ocr-pdfs` flow: plan groups, fan them out as tasks, gate the pages, report.

Orchestration only. Everything it calls is a plain pagegate module or a thin task over
one. The runtime objects (HTTP client, admission gate, render pool) are built here,
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
# Defaults are RunConfig's (pagegate/config.py), read by name: one source for every default.
import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
from prefect import State, flow, get_run_logger
from prefect.artifacts import acreate_table_artifact
from prefect.states import Completed, Failed
from pydantic import SecretStr

from pagegate.admission.base import Admission
from pagegate.admission.build import GateSettings, open_admission
from pagegate.clock import MonotonicClock
from pagegate.config import RunConfig
from pagegate.errors import PreflightError
from pagegate.heap import bound_heap, trim
from pagegate.ocr.job import record_missing
from pagegate.ocr.outcomes import GroupOutcome
from pagegate.ocr.run import open_run_context, open_run_server
from pagegate.ocr.turns import Turns
from pagegate.plan.groups import Group
from pagegate.plan.pending import PendingPlan
from pagegate.report.summary import (
    WORKSPACE_KEY,
    RunSummary,
    failure_rows,
    workspace_stopped_line,
)
from pagegate.tasks.admission_block import AdmissionGate
from pagegate.tasks.ocr_group import group_outcome, ocr_group
from pagegate.tasks.output_options import record_output_options
from pagegate.tasks.plan_groups import plan_pending_task
from pagegate.tasks.preflight import preflight_failed, preflight_failure
from pagegate.tasks.result_storage import resolve_result_storage
from pagegate.tasks.run_context_var import RUN_CONTEXT
from pagegate.tasks.run_monitor import create_summary_artifact, open_run_monitor
from pagegate.tasks.run_params import (
    AtLeastOne,
    PositiveSeconds,
    RunParams,
    Seconds,
    Share,
    run_settings,
)


@flow(name="ocr-pdfs")
async def ocr_pdfs(
    sources: list[str],
    workspace: str,
    server_url: str | None = None,
    model: str = RunConfig.model,
    profile: str | None = None,
    pages_per_group: AtLeastOne = RunConfig.pages_per_group,
    workers: AtLeastOne = RunConfig.workers,
    max_concurrent_requests: AtLeastOne = RunConfig.max_concurrent_requests,
    markdown: bool = RunConfig.markdown,
    target_longest_image_dim: AtLeastOne = RunConfig.target_longest_image_dim,
    max_page_retries: AtLeastOne = RunConfig.max_page_retries,
    gate: AdmissionGate | str | None = RunConfig.gate_block,
    gate_enabled: bool = RunConfig.use_gate,
    gate_overrides: dict[str, Any] | None = None,
    max_pages_per_pdf: AtLeastOne | None = RunConfig.max_pages_per_pdf,
    max_page_error_rate: Share = RunConfig.max_page_error_rate,
    drop_on_page_errors: bool = RunConfig.drop_on_page_errors,
    max_fallback_share: Share = RunConfig.max_fallback_share,
    pdf_password: SecretStr | None = None,
    pdf_password_secret: str | None = None,
    server_unavailable_after_seconds: Seconds = RunConfig.server_unavailable_after_seconds,
    s3_retry_mode: str = RunConfig.s3_retry_mode,
    aws_credentials: str | None = None,
    result_storage: str | None = None,
    launch_server: dict[str, Any] | None = None,
    server_urls: list[str] | None = None,
    capacity_backoff_max_seconds: PositiveSeconds = RunConfig.capacity_backoff_max_seconds,
    render_workers: AtLeastOne | None = RunConfig.render_workers,
    pdf_memory_budget_mb: AtLeastOne = RunConfig.pdf_memory_budget_mb,
    layout: bool = RunConfig.layout,
    claim_lease_seconds: PositiveSeconds = RunConfig.claim_lease_seconds,
) -> State[Any]:
    """OCR PDFs from S3 or disk into Dolma JSONL in WORKSPACE.

    Args:
        sources: s3://bucket/prefix, s3 globs, local folders, globs, or .txt lists of those.
        workspace: where results/, markdown/ and ledger/ go (local path or s3://bucket/prefix).
        server_url: the OpenAI-compatible base URL of the vLLM server, e.g. http://host:8000/v1;
            empty: the node's own, PAGEGATE_SERVER_URL in the worker's environment, else
            http://127.0.0.1:8000/v1 (pagegate/server/target.py).
        model: the served model name sent in each request.
        profile: the model's profile (docs/models.md), e.g. "chandra-2"; empty: the one the
            model names (launch_server's model, else model), else "olmocr-2".
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
        max_fallback_share: when a larger share of the run's pages fell back to the text
            layer, the run ends Failed saying so (the model did not really read them).
        pdf_password: password for encrypted PDFs (recorded masked; a UI retry cannot
            recover it, so deployments use pdf_password_secret).
        pdf_password_secret: name of a Prefect Secret block holding that password.
        server_unavailable_after_seconds: how long capacity errors may last before a
            PDF is recorded as `server_unavailable`.
        s3_retry_mode: botocore retry mode for S3, "standard" or "adaptive".
        aws_credentials: a prefect-aws block with the S3 credentials (and endpoint) for
            sources and workspace: an AwsCredentials block's name, or aws-credentials/NAME,
            s3-bucket/NAME, minio-credentials/NAME; empty: the worker's AWS environment.
        result_storage: where task results persist for retries: s3://bucket/prefix, a
            local path, or a saved block "type/name"; empty: Prefect's default.
        launch_server: launch and supervise a vLLM server for this run instead of using
            server_url, e.g. {"model": "allenai/olmOCR-2-7B-1025-FP8", "port": 8000,
            "hang_after_seconds": 180, "restart_budget": 5} (pagegate/server/managed.py).
        server_urls: several servers (e.g. one per GPU), each behind its own gate; every
            page goes to the least-loaded one still answering. Given, it replaces server_url.
        capacity_backoff_max_seconds: longest (jittered) pause between retries of a page
            the server could not take; retries go on until server_unavailable_after_seconds.
        render_workers: processes rendering pages, each with its own pdfium; empty: one
            per core this worker may use.
        pdf_memory_budget_mb: PDF bytes held in memory at once; PDFs are fetched only as
            their pages near admission, and larger ones are read from a file.
        layout: also write layout/<id>.jsonl, each page's blocks with boxes in PDF
            points (profiles that give layout; docs/models.md).
        claim_lease_seconds: runs over one workspace split its groups by claims; a run
            that stops renewing its claims for this long is taken to be gone, and the
            others take its groups over (docs/operations.md).
    """
    bound_heap()  # large transient buffers pass through this process (pagegate/heap.py)
    params = RunParams(
        workspace=workspace, server_url=server_url, model=model,
        pages_per_group=pages_per_group, workers=workers,
        max_concurrent_requests=max_concurrent_requests, markdown=markdown,
        target_longest_image_dim=target_longest_image_dim, max_page_retries=max_page_retries,
        gate=gate, gate_enabled=gate_enabled, gate_overrides=gate_overrides,
        max_pages_per_pdf=max_pages_per_pdf, max_page_error_rate=max_page_error_rate,
        drop_on_page_errors=drop_on_page_errors, max_fallback_share=max_fallback_share,
        pdf_password=pdf_password,
        pdf_password_secret=pdf_password_secret,
        server_unavailable_after_seconds=server_unavailable_after_seconds,
        s3_retry_mode=s3_retry_mode, aws_credentials=aws_credentials,
        result_storage=result_storage, launch_server=launch_server,
        server_urls=server_urls, capacity_backoff_max_seconds=capacity_backoff_max_seconds,
        render_workers=render_workers, pdf_memory_budget_mb=pdf_memory_budget_mb,
        profile=profile, layout=layout, claim_lease_seconds=claim_lease_seconds,
    )
    try:
        config, gate_settings = await run_settings(params, sources=sources)
    except PreflightError as exc:  # a block the run names is missing
        return preflight_failed(exc)
    stopped = await preflight_failure(config)
    if stopped is not None:
        return stopped
    storage = await resolve_result_storage(result_storage)
    planner = plan_pending_task.with_options(result_storage=storage) if storage else plan_pending_task
    plan = await planner(
        list(config.sources),
        config.pages_per_group,
        config.workspace,
        pdf_password=_secret(config.pdf_password),
        s3_retry_mode=config.s3_retry_mode,
        aws_credentials=aws_credentials,
        shared_as=config.run_id or "",
    )
    # Before the first commit: reprocess will write what this run writes, where it writes it.
    config = await asyncio.to_thread(record_output_options, config, plan.source_root)
    return await execute_plan(config, gate_settings, plan, result_storage=storage)


def _secret(password: str | None) -> SecretStr | None:
    return SecretStr(password) if password is not None else None


async def execute_plan(
    config: RunConfig,
    gate: GateSettings,
    plan: PendingPlan,
    *,
    result_storage: str | Path | None,
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
        open_admission(config, gate, http=http, clock=clock) as admission,
        open_run_context(config, admission, http=http, clock=clock) as ctx,
        open_run_monitor(ctx, groups) as monitor,
    ):
        # Claims released since the plan was made are news; reprocess plans no mark.
        fresh_after = plan.mark if plan.mark is not None else await ctx.claims.run_io(
            ctx.claims.board.mark)
        token = RUN_CONTEXT.set(ctx)
        try:
            turns = Turns(groups, workers=config.workers, holder=ctx.claims,
                          run_group=_group_runner(group_task), halt=ctx.halt,
                          on_done=monitor.group_finished, fresh_after=fresh_after)
            outcomes = await turns.run()
        finally:
            RUN_CONTEXT.reset(token)
        if turns.others:
            logger.info("shared the workspace with %s", ", ".join(sorted(turns.others.values())))
        if plan.missing:  # source entries that named nothing: recorded, counted as failed
            outcomes.append(await record_missing(ctx, plan.missing))
        elapsed = clock.now() - ctx.stats.started_at
        gate_state = _snapshot(admission)
        summary = RunSummary.of(outcomes, already_done=plan.already_done, elapsed_seconds=elapsed)
        report = await monitor.finish(summary.totals, elapsed)
    summary = replace(summary, chart_uri=report.chart_uri)
    await create_summary_artifact(summary, report, gate_state)
    if ctx.halt.error is not None:  # the workspace stopped taking writes (pagegate.ocr.halt)
        line = workspace_stopped_line(config.workspace, ctx.halt.error, summary.totals)
        return Failed(message=line, data={**summary.as_dict(), WORKSPACE_KEY: line})
    flagged = summary.flagged_message()
    if flagged:
        logger.warning(flagged)
    alarm = summary.fallback_alarm(config.max_fallback_share)
    if alarm:
        logger.error(alarm)
    if summary.failed:
        await acreate_table_artifact(
            key="ocr-failed-pdfs",
            table=failure_rows(summary.totals.failures),
            description="PDFs that could not be processed, with reasons",
        )
        # No log line of its own: Prefect logs the final state with this message.
        return Failed(message=summary.message(), data=summary.as_dict())
    if alarm:
        return Failed(message=alarm, data={**summary.as_dict(), "alarm": alarm})
    return Completed(message=summary.message(), data=summary.as_dict())


def _group_runner(task: Any) -> Callable[[Group], Awaitable[GroupOutcome]]:
    """One group as the claims' turns run it (pagegate.ocr.turns): its task, awaited in
    this event loop, and the outcome read from its final state whatever that is
    (completed, cached, failed with its PDFs recorded, crashed)."""

    async def one(group: Group) -> GroupOutcome:
        state = await task(group, return_state=True)
        outcome = await group_outcome(state, group)
        trim()  # a group's buffers are gone: hand their pages back (pagegate/heap.py)
        return outcome

    return one


def _snapshot(admission: Admission) -> dict[str, Any]:
    try:
        return admission.snapshot()
    except Exception:  # a summary must not fail the run
        return {}
