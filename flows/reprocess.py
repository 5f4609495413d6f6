"""The `reprocess` flow: redo the PDFs a workspace's failure ledger names, or a given list.

olmOCR never retries a document it dropped (allenai/olmocr #152, #154). Here every
failure has a ledger record, and this flow takes those records (optionally only some
reasons) or an explicit list of PDFs, and runs them through the same group tasks and
admission gate as `ocr-pdfs`. It works from the workspace, not from a flow run, so it
also covers CLI runs and runs whose retries are spent.

Which PDFs are redone: every selected PDF without a committed result, and committed
documents that carry a ledger record (`page_error_rate`: written with flagged
fallback pages). A selected PDF that is committed and clean is skipped.
"""

# No `from __future__ import annotations`: Prefect builds the parameter model from these
# annotations, and a served run may see the function without its module's globals.
# Defaults are RunConfig's (pagegate/config.py), read by name, as in flows/ocr_pdfs.py.
import asyncio
from typing import Any

from prefect import State, flow, get_run_logger
from prefect.states import Completed
from pydantic import SecretStr

from pagegate.config import RunConfig
from pagegate.errors import PreflightError
from pagegate.flows.ocr_pdfs import execute_plan
from pagegate.heap import bound_heap
from pagegate.plan.reprocess import check_reasons
from pagegate.report.summary import RunSummary
from pagegate.tasks.admission_block import AdmissionGate
from pagegate.tasks.output_options import with_recorded_options
from pagegate.tasks.plan_groups import plan_uris_task
from pagegate.tasks.preflight import preflight_failed, preflight_failure
from pagegate.tasks.reprocess_select import select_from_ledger_task
from pagegate.tasks.result_storage import resolve_result_storage
from pagegate.tasks.run_params import (
    AtLeastOne,
    PositiveSeconds,
    RunParams,
    Seconds,
    Share,
    run_settings,
)


@flow(name="reprocess")
async def reprocess(
    workspace: str,
    pdfs: list[str] | None = None,
    only_reasons: list[str] | None = None,
    server_url: str | None = None,
    model: str = RunConfig.model,
    profile: str | None = None,
    pages_per_group: AtLeastOne = RunConfig.pages_per_group,
    workers: AtLeastOne = RunConfig.workers,
    max_concurrent_requests: AtLeastOne = RunConfig.max_concurrent_requests,
    markdown: bool | None = None,
    target_longest_image_dim: AtLeastOne = RunConfig.target_longest_image_dim,
    max_page_retries: AtLeastOne = RunConfig.max_page_retries,
    gate: AdmissionGate | str | None = RunConfig.gate_block,
    gate_enabled: bool = RunConfig.use_gate,
    gate_overrides: dict[str, Any] | None = None,
    max_pages_per_pdf: AtLeastOne | None = RunConfig.max_pages_per_pdf,
    max_page_error_rate: Share = RunConfig.max_page_error_rate,
    drop_on_page_errors: bool | None = None,
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
    """Retry the failed PDFs of WORKSPACE (its ledger), or exactly the PDFs listed.

    Args:
        workspace: the workspace whose ledger to work through, and where results go.
        pdfs: explicit PDF locations to redo instead of the ledger.
        only_reasons: take only ledger records with these reasons, e.g. ["server_unavailable"].
        markdown, drop_on_page_errors: empty: as the workspace's last run recorded them.
        (the other parameters are those of `ocr-pdfs`)
    """
    bound_heap()  # large transient buffers pass through this process (pagegate/heap.py)
    params = RunParams(
        workspace=workspace, server_url=server_url, model=model,
        pages_per_group=pages_per_group, workers=workers,
        max_concurrent_requests=max_concurrent_requests, markdown=bool(markdown),
        target_longest_image_dim=target_longest_image_dim, max_page_retries=max_page_retries,
        gate=gate, gate_enabled=gate_enabled, gate_overrides=gate_overrides,
        max_pages_per_pdf=max_pages_per_pdf, max_page_error_rate=max_page_error_rate,
        drop_on_page_errors=bool(drop_on_page_errors), max_fallback_share=max_fallback_share,
        pdf_password=pdf_password,
        pdf_password_secret=pdf_password_secret,
        server_unavailable_after_seconds=server_unavailable_after_seconds,
        s3_retry_mode=s3_retry_mode, aws_credentials=aws_credentials,
        result_storage=result_storage, launch_server=launch_server,
        server_urls=server_urls, capacity_backoff_max_seconds=capacity_backoff_max_seconds,
        render_workers=render_workers, pdf_memory_budget_mb=pdf_memory_budget_mb,
        profile=profile, layout=layout, claim_lease_seconds=claim_lease_seconds,
    )
    logger = get_run_logger()
    if only_reasons:
        check_reasons(only_reasons)
    if pdfs:
        chosen = list(dict.fromkeys(pdfs))
    else:
        chosen = await select_from_ledger_task(
            workspace, only_reasons, s3_retry_mode=s3_retry_mode, aws_credentials=aws_credentials
        )
    if not chosen:
        logger.info("nothing to reprocess in %s", workspace)
        return Completed(message="nothing to reprocess", data=RunSummary().as_dict())
    logger.info("reprocessing %d PDF(s) from %s", len(chosen), "the list" if pdfs else "the ledger")
    try:
        config, gate_settings = await run_settings(params, sources=chosen, redo_flagged=True)
    except PreflightError as exc:  # a block the run names is missing
        return preflight_failed(exc)
    stopped = await preflight_failure(config, check_sources=False)
    if stopped is not None:
        return stopped
    config = await asyncio.to_thread(
        with_recorded_options, config, markdown=markdown, drop_on_page_errors=drop_on_page_errors
    )
    storage = await resolve_result_storage(result_storage)
    planner = plan_uris_task.with_options(result_storage=storage) if storage else plan_uris_task
    plan = await planner(
        chosen,
        pages_per_group,
        pdf_password=SecretStr(config.pdf_password) if config.pdf_password else None,
        s3_retry_mode=s3_retry_mode,
        aws_credentials=aws_credentials,
    )
    return await execute_plan(config, gate_settings, plan, result_storage=storage)
