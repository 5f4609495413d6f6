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
from typing import Any

from prefect import State, flow, get_run_logger
from prefect.states import Completed
from pydantic import SecretStr

from flows.ocr_pdfs import execute_plan, flow_run_config
from pagegate.plan.reprocess import check_reasons
from tasks.admission_block import AdmissionGate
from tasks.ocr_group import plan_uris_task
from tasks.reprocess_select import select_from_ledger_task
from tasks.result_storage import resolve_result_storage


@flow(name="reprocess")
async def reprocess(
    workspace: str,
    pdfs: list[str] | None = None,
    only_reasons: list[str] | None = None,
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
    """Retry the failed PDFs of WORKSPACE (its ledger), or exactly the PDFs listed.

    Args:
        workspace: the workspace whose ledger to work through, and where results go.
        pdfs: explicit PDF locations to redo instead of the ledger.
        only_reasons: take only ledger records with these reasons, e.g. ["server_unavailable"].
        (the other parameters are those of `ocr-pdfs`)
    """
    params = dict(locals())  # the flat flow parameters, for flow_run_config
    logger = get_run_logger()
    if only_reasons:
        check_reasons(only_reasons)
    if pdfs:
        chosen = list(dict.fromkeys(pdfs))
    else:
        chosen = await select_from_ledger_task(workspace, only_reasons, s3_retry_mode=s3_retry_mode)
    if not chosen:
        logger.info("nothing to reprocess in %s", workspace)
        return Completed(message="nothing to reprocess", data=_empty_summary())
    logger.info("reprocessing %d PDF(s) from %s", len(chosen), "the list" if pdfs else "the ledger")
    config = await flow_run_config(params, sources=chosen, redo_flagged=True)
    storage = await resolve_result_storage(result_storage)
    planner = plan_uris_task.with_options(result_storage=storage) if storage else plan_uris_task
    plan = await planner(
        chosen,
        pages_per_group,
        pdf_password=SecretStr(config.pdf_password) if config.pdf_password else None,
        s3_retry_mode=s3_retry_mode,
    )
    return await execute_plan(config, plan, result_storage=storage)


def _empty_summary() -> dict[str, Any]:
    keys = ("pdfs_ok", "pdfs_failed", "pdfs_skipped", "pages", "fallback_pages",
            "input_tokens", "output_tokens")
    return {**dict.fromkeys(keys, 0), "elapsed_seconds": 0.0, "failed": [], "flagged": []}
