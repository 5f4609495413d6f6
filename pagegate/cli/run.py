"""`pagegate run` and `pagegate reprocess`: a flow run from the command line, then its summary.

Every default is RunConfig's (pagegate/config.py), read by name; tests/test_run_defaults.py
checks each option the commands share with RunConfig. The flows are called with
keywords, so mypy checks every name against their signatures.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from pagegate.cli.flowrun import prefect_env, run_flow_state
from pagegate.cli.options import (
    GATE,
    OUTPUT,
    PAGES,
    AwsCredentialsOpt,
    ClaimLeaseOpt,
    DebugOpt,
    DpOpt,
    DropOnPageErrorsOpt,
    GateOpt,
    GpuMemOpt,
    GpusOpt,
    HangAfterOpt,
    JsonOpt,
    LayoutOpt,
    LimitMmOpt,
    MarkdownOpt,
    MaxFallbackShareOpt,
    MaxModelLenOpt,
    MaxNumSeqsOpt,
    MaxPageErrorRateOpt,
    MaxPageRetriesOpt,
    MaxPagesOpt,
    ModelOpt,
    NoGateOpt,
    PagesPerGroupOpt,
    PdfMemoryBudgetOpt,
    PdfPasswordOpt,
    PdfPasswordSecretOpt,
    ProfileOpt,
    RecordedDropOpt,
    RecordedMarkdownOpt,
    RenderWorkersOpt,
    RestartBudgetOpt,
    RestartRefillOpt,
    ResultStorageOpt,
    S3RetryModeOpt,
    ServedNameOpt,
    ServerOpt,
    TpOpt,
    UnavailableAfterOpt,
    VllmArgOpt,
    VllmCommandOpt,
    VllmPortOpt,
    WorkersOpt,
    chosen_profile,
    gate_overrides,
    preflight_of,
    run_target,
    secret,
)
from pagegate.cli.outcome import (
    EXIT_SERVER,
    EXIT_STORAGE,
    EXIT_USAGE,
    fail,
    one_line_errors,
    run_exit_code,
)
from pagegate.config import RunConfig


def run_command(
    sources: Annotated[list[str], typer.Argument(help="s3://bucket/prefix, globs, folders, files, or .txt lists.")],
    workspace: Annotated[str, typer.Option(help="Output location: local folder or s3://bucket/prefix.", rich_help_panel=OUTPUT)],
    server: ServerOpt = None,
    model: ModelOpt = None,
    profile: ProfileOpt = None,
    layout: LayoutOpt = RunConfig.layout,
    pages_per_group: PagesPerGroupOpt = RunConfig.pages_per_group,
    workers: WorkersOpt = RunConfig.workers,
    max_concurrent_requests: Annotated[int, typer.Option(min=1, help="Requests in flight when the gate is off.", rich_help_panel=GATE)] = RunConfig.max_concurrent_requests,
    markdown: MarkdownOpt = RunConfig.markdown,
    target_longest_image_dim: Annotated[int, typer.Option(min=28, help="Rendered page size (longest side, px) for profiles sized that way (olmocr-2); others use their model's rule.", rich_help_panel=PAGES)] = RunConfig.target_longest_image_dim,
    max_page_retries: MaxPageRetriesOpt = RunConfig.max_page_retries,
    gate: GateOpt = RunConfig.gate_block,
    no_gate: NoGateOpt = False,
    gate_peak_ratio: Annotated[float | None, typer.Option(min=0.0, help="Release only when waiting <= ratio x peak.", show_default="the block's", rich_help_panel=GATE)] = None,
    gate_cooldown: Annotated[float | None, typer.Option(min=0.0, help="Seconds between releases.", show_default="the block's", rich_help_panel=GATE)] = None,
    gate_max_in_flight: Annotated[int | None, typer.Option(min=1, help="Hard cap on pages in flight.", show_default="the block's", rich_help_panel=GATE)] = None,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
    max_pages_per_pdf: MaxPagesOpt = RunConfig.max_pages_per_pdf,
    max_page_error_rate: MaxPageErrorRateOpt = RunConfig.max_page_error_rate,
    drop_on_page_errors: DropOnPageErrorsOpt = RunConfig.drop_on_page_errors,
    max_fallback_share: MaxFallbackShareOpt = RunConfig.max_fallback_share,
    pdf_password: PdfPasswordOpt = RunConfig.pdf_password,
    pdf_password_secret: PdfPasswordSecretOpt = None,
    server_unavailable_after_seconds: UnavailableAfterOpt = RunConfig.server_unavailable_after_seconds,
    s3_retry_mode: S3RetryModeOpt = RunConfig.s3_retry_mode,
    aws_credentials: AwsCredentialsOpt = None,
    result_storage: ResultStorageOpt = None,
    vllm_command: VllmCommandOpt = None,
    vllm_port: VllmPortOpt = None,
    served_model_name: ServedNameOpt = None,
    gpu_memory_utilization: GpuMemOpt = None,
    max_model_len: MaxModelLenOpt = None,
    tensor_parallel_size: TpOpt = None,
    data_parallel_size: DpOpt = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    limit_mm_per_prompt: LimitMmOpt = None,
    vllm_arg: VllmArgOpt = None,
    hang_after: HangAfterOpt = None,
    restart_budget: RestartBudgetOpt = None,
    restart_refill: RestartRefillOpt = None,
    gpus: GpusOpt = None,
    render_workers: RenderWorkersOpt = RunConfig.render_workers,
    pdf_memory_budget_mb: PdfMemoryBudgetOpt = RunConfig.pdf_memory_budget_mb,
    claim_lease_seconds: ClaimLeaseOpt = RunConfig.claim_lease_seconds,
) -> None:
    """OCR PDFs into Dolma JSONL as a Prefect flow run.

    Exit codes: 0 all converted, 1 some PDFs failed, 2 usage or preflight error,
    3 server unavailable, 4 the workspace stopped taking writes, 130 SIGINT, 143 SIGTERM.
    """
    chosen = chosen_profile(profile, model)
    target = run_target(
        server, model, vllm_command, vllm_port, served_model_name, gpu_memory_utilization,
        max_model_len, tensor_parallel_size, data_parallel_size, max_num_seqs,
        limit_mm_per_prompt, vllm_arg, hang_after, restart_budget, restart_refill, gpus,
    )
    with one_line_errors(debug=debug):
        from pagegate.ocr.preflight import run_preflight

        run_preflight(preflight_of(
            target, workspace=workspace, sources=list(sources), s3_retry_mode=s3_retry_mode,
            aws_credentials=aws_credentials,
        ))
        prefect_env()
        from pagegate.flows.ocr_pdfs import ocr_pdfs

        ok, summary = run_flow_state(lambda: ocr_pdfs(
            sources=list(sources),
            workspace=workspace,
            **target,
            pages_per_group=pages_per_group,
            workers=workers,
            max_concurrent_requests=max_concurrent_requests,
            markdown=markdown,
            target_longest_image_dim=target_longest_image_dim,
            max_page_retries=max_page_retries,
            gate=gate,
            gate_enabled=not no_gate,
            gate_overrides=gate_overrides(gate_peak_ratio, gate_cooldown, gate_max_in_flight),
            max_pages_per_pdf=max_pages_per_pdf,
            max_page_error_rate=max_page_error_rate,
            drop_on_page_errors=drop_on_page_errors,
            max_fallback_share=max_fallback_share,
            pdf_password=secret(pdf_password),
            pdf_password_secret=pdf_password_secret,
            server_unavailable_after_seconds=server_unavailable_after_seconds,
            s3_retry_mode=s3_retry_mode,
            aws_credentials=aws_credentials,
            result_storage=result_storage,
            render_workers=render_workers,
            pdf_memory_budget_mb=pdf_memory_budget_mb,
            profile=chosen,
            layout=layout,
            claim_lease_seconds=claim_lease_seconds,
            return_state=True,
        ))
    finish(ok, summary, workspace, json_out=json_out)


def reprocess_command(
    workspace: Annotated[str, typer.Argument(help="Workspace whose failure ledger to work through.")],
    pdfs: Annotated[list[str] | None, typer.Argument(help="Redo exactly these PDFs instead of the ledger's.")] = None,
    only_reason: Annotated[list[str] | None, typer.Option(help="Only ledger records with this reason (repeatable).", show_default="every reason", rich_help_panel=OUTPUT)] = None,
    server: ServerOpt = None,
    model: ModelOpt = None,
    profile: ProfileOpt = None,
    layout: LayoutOpt = RunConfig.layout,
    pages_per_group: PagesPerGroupOpt = RunConfig.pages_per_group,
    workers: WorkersOpt = RunConfig.workers,
    markdown: RecordedMarkdownOpt = None,
    max_page_retries: MaxPageRetriesOpt = RunConfig.max_page_retries,
    gate: GateOpt = RunConfig.gate_block,
    no_gate: NoGateOpt = False,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
    max_pages_per_pdf: MaxPagesOpt = RunConfig.max_pages_per_pdf,
    max_page_error_rate: MaxPageErrorRateOpt = RunConfig.max_page_error_rate,
    drop_on_page_errors: RecordedDropOpt = None,
    max_fallback_share: MaxFallbackShareOpt = RunConfig.max_fallback_share,
    pdf_password: PdfPasswordOpt = RunConfig.pdf_password,
    pdf_password_secret: PdfPasswordSecretOpt = None,
    server_unavailable_after_seconds: UnavailableAfterOpt = RunConfig.server_unavailable_after_seconds,
    s3_retry_mode: S3RetryModeOpt = RunConfig.s3_retry_mode,
    aws_credentials: AwsCredentialsOpt = None,
    result_storage: ResultStorageOpt = None,
    vllm_command: VllmCommandOpt = None,
    vllm_port: VllmPortOpt = None,
    served_model_name: ServedNameOpt = None,
    gpu_memory_utilization: GpuMemOpt = None,
    max_model_len: MaxModelLenOpt = None,
    tensor_parallel_size: TpOpt = None,
    data_parallel_size: DpOpt = None,
    max_num_seqs: MaxNumSeqsOpt = None,
    limit_mm_per_prompt: LimitMmOpt = None,
    vllm_arg: VllmArgOpt = None,
    hang_after: HangAfterOpt = None,
    restart_budget: RestartBudgetOpt = None,
    restart_refill: RestartRefillOpt = None,
    gpus: GpusOpt = None,
    render_workers: RenderWorkersOpt = RunConfig.render_workers,
    pdf_memory_budget_mb: PdfMemoryBudgetOpt = RunConfig.pdf_memory_budget_mb,
    claim_lease_seconds: ClaimLeaseOpt = RunConfig.claim_lease_seconds,
) -> None:
    """Retry the PDFs in WORKSPACE's failure ledger (or exactly PDF...); exits as `run` does.

    Documents kept with flagged fallback pages (page_error_rate) are redone too; a
    listed PDF that is already committed cleanly is skipped. --markdown and
    --drop-on-page-errors default to what the workspace's last run recorded, so the
    redone PDFs get the same outputs, in the same places, as the others.
    """
    from pagegate.plan.reprocess import check_reasons

    try:
        reasons = sorted(check_reasons(only_reason or []))
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--only-reason") from None
    chosen = chosen_profile(profile, model)
    target = run_target(
        server, model, vllm_command, vllm_port, served_model_name, gpu_memory_utilization,
        max_model_len, tensor_parallel_size, data_parallel_size, max_num_seqs,
        limit_mm_per_prompt, vllm_arg, hang_after, restart_budget, restart_refill, gpus,
    )
    with one_line_errors(debug=debug):
        from pagegate.ocr.preflight import run_preflight

        run_preflight(preflight_of(
            target, workspace=workspace, sources=[], s3_retry_mode=s3_retry_mode,
            aws_credentials=aws_credentials,
        ))
        prefect_env()
        from pagegate.flows.reprocess import reprocess

        ok, summary = run_flow_state(lambda: reprocess(
            workspace=workspace,
            pdfs=list(pdfs or []) or None,
            only_reasons=reasons or None,
            **target,
            pages_per_group=pages_per_group,
            workers=workers,
            markdown=markdown,
            max_page_retries=max_page_retries,
            gate=gate,
            gate_enabled=not no_gate,
            max_pages_per_pdf=max_pages_per_pdf,
            max_page_error_rate=max_page_error_rate,
            drop_on_page_errors=drop_on_page_errors,
            max_fallback_share=max_fallback_share,
            pdf_password=secret(pdf_password),
            pdf_password_secret=pdf_password_secret,
            server_unavailable_after_seconds=server_unavailable_after_seconds,
            s3_retry_mode=s3_retry_mode,
            aws_credentials=aws_credentials,
            result_storage=result_storage,
            render_workers=render_workers,
            pdf_memory_budget_mb=pdf_memory_budget_mb,
            profile=chosen,
            layout=layout,
            claim_lease_seconds=claim_lease_seconds,
            return_state=True,
        ))
    finish(ok, summary, workspace, json_out=json_out)


def finish(ok: bool, summary: dict[str, Any], workspace: str, *, json_out: bool) -> None:
    """Print the summary, or the one line of a run its preflight stopped; exit accordingly."""
    from pagegate.ocr.preflight import ERROR_KEY, UNREACHABLE_KEY
    from pagegate.report.summary import WORKSPACE_KEY

    if summary.get(ERROR_KEY):
        fail(str(summary[ERROR_KEY]), EXIT_SERVER if summary.get(UNREACHABLE_KEY) else EXIT_USAGE)
    print_summary(summary, workspace, json_out=json_out)
    if summary.get(WORKSPACE_KEY):
        fail(str(summary[WORKSPACE_KEY]), EXIT_STORAGE)
    raise typer.Exit(run_exit_code(ok, summary))


def print_summary(summary: dict[str, Any], workspace: str, *, json_out: bool) -> None:
    """The run's summary (pagegate.report.summary.RunSummary.as_dict) on stdout."""
    if json_out:
        typer.echo(json.dumps(summary, indent=2))
        return
    elapsed = float(summary.get("elapsed_seconds") or 0.0)
    pages = int(summary.get("pages") or 0)
    rate = pages / elapsed if elapsed > 0 else 0.0
    if summary.get("alarm"):
        typer.echo(f"WARNING: {summary['alarm']}")
    others = int(summary.get("pdfs_ok_by_others") or 0)
    share = f" (this run {summary.get('pdfs_ok', 0) - others}, others {others})" if others else ""
    typer.echo(
        f"PDFs ok: {summary.get('pdfs_ok', 0)}{share}  failed: {summary.get('pdfs_failed', 0)}  "
        f"skipped: {summary.get('pdfs_skipped', 0)}  "
        + (f"not done: {summary['pdfs_stopped']}  " if summary.get("pdfs_stopped") else "")
        + f"pages: {pages}  "
        f"fallback pages: {summary.get('fallback_pages', 0)}  {rate:.2f} pages/s"
    )
    for failure in summary.get("failed", []):
        typer.echo(f"  FAILED {failure['source']}: {failure['reason']} ({failure['detail']})")
    for flagged in summary.get("flagged", []):
        typer.echo(f"  FLAGGED {flagged['source']}: {flagged['reason']} ({flagged['detail']})")
    typer.echo(f"results: {workspace.rstrip('/')}/results/  ledger: {workspace.rstrip('/')}/ledger/")
    if summary.get("chart"):
        typer.echo(f"run chart: {summary['chart']}")
