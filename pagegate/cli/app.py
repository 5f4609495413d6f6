"""The `pagegate` command line: run, sim, demo.

Prefect is imported only by the commands that run flows, so `pagegate sim` and
`--help` stay quick.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any, cast

import typer

from pagegate.cli.blocks import blocks_app
from pagegate.cli.plan import plan_command
from pagegate.cli.stats import stats_command
from pagegate.sim.command import sim_command

app = typer.Typer(
    name="pagegate",
    help="OCR large PDF collections through a vision-language model on vLLM, behind an admission gate.",
    no_args_is_help=True,
    add_completion=False,
)
app.command("sim", help="Serve the vLLM-compatible simulator (OpenAI API + /metrics).")(sim_command)
app.command("stats")(stats_command)
app.command("plan")(plan_command)
app.add_typer(blocks_app)


def _prefect_env() -> None:
    """Send pagegate's own loggers to the Prefect run log; keep telemetry off by default.

    pypdf warns about every repair it makes on a damaged file; the failure ledger already
    records what matters, so only its errors reach the log.
    """
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "pagegate")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    # Prefect gives extra loggers its handlers but not a level (root: WARNING); a launched
    # server's output and the watchdog's notes are INFO and belong in the run log.
    for name in ("pagegate.vllm", "pagegate.server", "pagegate.router"):
        logging.getLogger(name).setLevel(logging.INFO)


def _gate_overrides(
    peak_ratio: float | None, cooldown: float | None, max_in_flight: int | None
) -> dict[str, Any]:
    pairs = {
        "peak_ratio": peak_ratio,
        "cooldown_seconds": cooldown,
        "max_in_flight_pages": max_in_flight,
    }
    return {k: v for k, v in pairs.items() if v is not None}


def run_flow(**params: Any) -> tuple[bool, dict[str, Any]]:
    """Run the ocr-pdfs flow as a real Prefect flow run; (completed?, summary)."""
    _prefect_env()
    from flows.ocr_pdfs import ocr_pdfs

    return _run_flow_state(ocr_pdfs, params)


def run_reprocess_flow(**params: Any) -> tuple[bool, dict[str, Any]]:
    """Run the reprocess flow as a real Prefect flow run; (completed?, summary)."""
    _prefect_env()
    from flows.reprocess import reprocess

    return _run_flow_state(reprocess, params)


def _run_flow_state(flow_fn: Any, params: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    from pagegate.report.display import TerminalProgress
    from pagegate.report.progress import PROGRESS_LISTENER

    # The live display (stderr) is handed to the flow through a context variable.
    with TerminalProgress() as display:
        token = PROGRESS_LISTENER.set(display)
        try:
            coro = cast(Coroutine[Any, Any, Any], flow_fn(**params, return_state=True))
            state = asyncio.run(coro)
        finally:
            PROGRESS_LISTENER.reset(token)
    data = state.result(raise_on_failure=False)
    if asyncio.iscoroutine(data):
        data = asyncio.run(data)
    summary = data if isinstance(data, dict) else {"message": state.message}
    return bool(state.is_completed()), summary


# Options shared by `run` and `reprocess`: how bad inputs and outages are handled.
MaxPagesOpt = Annotated[int | None, typer.Option(help="PDFs with more pages go to the ledger (too_many_pages).")]
MaxPageErrorRateOpt = Annotated[float, typer.Option(help="Share of fallback pages above which a PDF gets a page_error_rate record.")]
DropOnPageErrorsOpt = Annotated[bool, typer.Option("--drop-on-page-errors", help="Over the rate: don't write the document (default: write it, fallback pages flagged).")]
PdfPasswordOpt = Annotated[str | None, typer.Option(envvar="PAGEGATE_PDF_PASSWORD", show_default=False, help="Password for encrypted PDFs (prefer the env var; never logged).")]
PdfPasswordSecretOpt = Annotated[str | None, typer.Option(help="Name of a Prefect Secret block holding the PDF password.")]
UnavailableAfterOpt = Annotated[float, typer.Option("--server-unavailable-after", help="Seconds a server may refuse or be unreachable (capacity errors, gate paused) before the PDFs waiting on it are recorded as server_unavailable; the run never exits for it.")]
S3RetryModeOpt = Annotated[str, typer.Option(help="botocore retry mode for S3: standard or adaptive.")]
ResultStorageOpt = Annotated[str | None, typer.Option(help="Where task results persist for retries: s3://bucket/prefix, a path, or a block type/name.")]

# Options of a server pagegate launches itself (`run --model MODEL` without --server).
_LAUNCH = "Launched server: "
VllmCommandOpt = Annotated[str | None, typer.Option(help=_LAUNCH + "command line, {model} marks the model (default: vllm serve {model}).")]
VllmPortOpt = Annotated[int | None, typer.Option(help=_LAUNCH + "port (default 8000).")]
ServedNameOpt = Annotated[str | None, typer.Option(help=_LAUNCH + "served model name (default olmocr).")]
GpuMemOpt = Annotated[float | None, typer.Option(help=_LAUNCH + "vLLM --gpu-memory-utilization.")]
MaxModelLenOpt = Annotated[int | None, typer.Option(help=_LAUNCH + "vLLM --max-model-len.")]
TpOpt = Annotated[int | None, typer.Option(help=_LAUNCH + "vLLM --tensor-parallel-size.")]
DpOpt = Annotated[int | None, typer.Option(help=_LAUNCH + "vLLM --data-parallel-size.")]
MaxNumSeqsOpt = Annotated[int | None, typer.Option(help=_LAUNCH + "vLLM --max-num-seqs.")]
LimitMmOpt = Annotated[str | None, typer.Option(help=_LAUNCH + 'vLLM --limit-mm-per-prompt (default {"video": 0}).')]
VllmArgOpt = Annotated[list[str] | None, typer.Option(help=_LAUNCH + "extra argument passed verbatim (repeatable; --vllm-arg=--enforce-eager).")]
HangAfterOpt = Annotated[float | None, typer.Option(help=_LAUNCH + "restart when work waits and no token is generated for this many seconds (default 180).")]
RestartBudgetOpt = Annotated[int | None, typer.Option(help=_LAUNCH + "restarts allowed at once (default 5).")]
RestartRefillOpt = Annotated[float | None, typer.Option(help=_LAUNCH + "seconds to earn one restart back (default 600).")]
GpusOpt = Annotated[str | None, typer.Option(help=_LAUNCH + "one server per GPU, e.g. 0,1 (CUDA_VISIBLE_DEVICES each, ports from --vllm-port up; 0+1,2+3: two GPUs per server); pages go to the least-loaded.")]


def _robustness_params(
    max_pages_per_pdf: int | None,
    max_page_error_rate: float,
    drop_on_page_errors: bool,
    pdf_password: str | None,
    pdf_password_secret: str | None,
    server_unavailable_after: float,
    s3_retry_mode: str,
    result_storage: str | None,
) -> dict[str, Any]:
    from pydantic import SecretStr

    return {
        "max_pages_per_pdf": max_pages_per_pdf,
        "max_page_error_rate": max_page_error_rate,
        "drop_on_page_errors": drop_on_page_errors,
        "pdf_password": SecretStr(pdf_password) if pdf_password else None,
        "pdf_password_secret": pdf_password_secret,
        "server_unavailable_after_seconds": server_unavailable_after,
        "s3_retry_mode": s3_retry_mode,
        "result_storage": result_storage,
    }


def _run_target(
    server: list[str] | None, model: str | None, vllm_command: str | None,
    vllm_port: int | None, served_model_name: str | None,
    gpu_memory_utilization: float | None, max_model_len: int | None,
    tensor_parallel_size: int | None, data_parallel_size: int | None,
    max_num_seqs: int | None, limit_mm_per_prompt: str | None, vllm_arg: list[str] | None,
    hang_after: float | None, restart_budget: int | None, restart_refill: float | None,
    gpus: str | None,
) -> dict[str, Any]:
    """server_url/server_urls/model/launch_server flow parameters (shared by run, reprocess)."""
    from pagegate.server.target import run_target_params

    launch = {
        "command": vllm_command, "port": vllm_port, "served_model_name": served_model_name,
        "gpu_memory_utilization": gpu_memory_utilization, "max_model_len": max_model_len,
        "tensor_parallel_size": tensor_parallel_size, "data_parallel_size": data_parallel_size,
        "max_num_seqs": max_num_seqs, "limit_mm_per_prompt": limit_mm_per_prompt,
        "extra_args": tuple(vllm_arg or ()), "hang_after_seconds": hang_after,
        "restart_budget": restart_budget, "restart_refill_seconds": restart_refill,
        "gpus": gpus,
    }
    try:
        return run_target_params(server, model, launch)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


ServerOpt = Annotated[list[str] | None, typer.Option(metavar="URL", help="OpenAI base URL of an external vLLM server (default http://127.0.0.1:8000/v1 unless --model launches one). Repeat for several servers (e.g. one per GPU): pages go to the least-loaded one.")]
ModelOpt = Annotated[str | None, typer.Option(help="With --server: its served model name (default olmocr). Without: launch and supervise `vllm serve MODEL`.")]


@app.command()
def run(
    sources: Annotated[list[str], typer.Argument(help="s3://bucket/prefix, globs, folders, files, or .txt lists.")],
    workspace: Annotated[str, typer.Option(help="Output location: local folder or s3://bucket/prefix.")],
    server: ServerOpt = None,
    model: ModelOpt = None,
    pages_per_group: Annotated[int, typer.Option(help="Target pages per group task.")] = 500,
    workers: Annotated[int, typer.Option(help="Group tasks at once.")] = 20,
    max_concurrent_requests: Annotated[int, typer.Option(help="Requests in flight when the gate is off.")] = 1600,
    markdown: Annotated[bool, typer.Option("--markdown", help="Also write one .md per PDF.")] = False,
    target_longest_image_dim: Annotated[int, typer.Option(help="Rendered page size (longest side, px).")] = 1288,
    max_page_retries: Annotated[int, typer.Option(help="Model attempts per page before text fallback.")] = 8,
    gate: Annotated[str | None, typer.Option(help="Name of a saved AdmissionGate block.")] = None,
    no_gate: Annotated[bool, typer.Option("--no-gate", help="Disable the gate; cap requests only.")] = False,
    gate_peak_ratio: Annotated[float | None, typer.Option(help="Release only when waiting <= ratio x peak.")] = None,
    gate_cooldown: Annotated[float | None, typer.Option(help="Seconds between releases.")] = None,
    gate_max_in_flight: Annotated[int | None, typer.Option(help="Hard cap on pages in flight.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
    max_pages_per_pdf: MaxPagesOpt = None,
    max_page_error_rate: MaxPageErrorRateOpt = 0.004,
    drop_on_page_errors: DropOnPageErrorsOpt = False,
    pdf_password: PdfPasswordOpt = None,
    pdf_password_secret: PdfPasswordSecretOpt = None,
    server_unavailable_after: UnavailableAfterOpt = 1800.0,
    s3_retry_mode: S3RetryModeOpt = "standard",
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
) -> None:
    """OCR PDFs into Dolma JSONL as a Prefect flow run; exits 1 if any PDF failed."""
    target = _run_target(
        server, model, vllm_command, vllm_port, served_model_name, gpu_memory_utilization,
        max_model_len, tensor_parallel_size, data_parallel_size, max_num_seqs,
        limit_mm_per_prompt, vllm_arg, hang_after, restart_budget, restart_refill, gpus,
    )
    ok, summary = run_flow(
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
        gate_overrides=_gate_overrides(gate_peak_ratio, gate_cooldown, gate_max_in_flight),
        **_robustness_params(
            max_pages_per_pdf, max_page_error_rate, drop_on_page_errors, pdf_password,
            pdf_password_secret, server_unavailable_after, s3_retry_mode, result_storage,
        ),
    )
    _print_summary(summary, workspace, json_out=json_out)
    raise typer.Exit(0 if ok else 1)


@app.command()
def reprocess(
    workspace: Annotated[str, typer.Argument(help="Workspace whose failure ledger to work through.")],
    pdfs: Annotated[list[str] | None, typer.Argument(help="Redo exactly these PDFs instead of the ledger's.")] = None,
    only_reason: Annotated[list[str] | None, typer.Option(help="Only ledger records with this reason (repeatable).")] = None,
    server: ServerOpt = None,
    model: ModelOpt = None,
    pages_per_group: Annotated[int, typer.Option(help="Target pages per group task.")] = 500,
    workers: Annotated[int, typer.Option(help="Group tasks at once.")] = 20,
    markdown: Annotated[bool, typer.Option("--markdown", help="Also write one .md per PDF.")] = False,
    max_page_retries: Annotated[int, typer.Option(help="Model attempts per page before text fallback.")] = 8,
    gate: Annotated[str | None, typer.Option(help="Name of a saved AdmissionGate block.")] = None,
    no_gate: Annotated[bool, typer.Option("--no-gate", help="Disable the gate; cap requests only.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
    max_pages_per_pdf: MaxPagesOpt = None,
    max_page_error_rate: MaxPageErrorRateOpt = 0.004,
    drop_on_page_errors: DropOnPageErrorsOpt = False,
    pdf_password: PdfPasswordOpt = None,
    pdf_password_secret: PdfPasswordSecretOpt = None,
    server_unavailable_after: UnavailableAfterOpt = 1800.0,
    s3_retry_mode: S3RetryModeOpt = "standard",
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
) -> None:
    """Retry the PDFs in WORKSPACE's failure ledger (or exactly PDF...); exits 1 if any still fail.

    Documents kept with flagged fallback pages (page_error_rate) are redone too; a
    listed PDF that is already committed cleanly is skipped.
    """
    from pagegate.plan.reprocess import check_reasons

    try:
        reasons = sorted(check_reasons(only_reason or []))
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--only-reason") from None
    target = _run_target(
        server, model, vllm_command, vllm_port, served_model_name, gpu_memory_utilization,
        max_model_len, tensor_parallel_size, data_parallel_size, max_num_seqs,
        limit_mm_per_prompt, vllm_arg, hang_after, restart_budget, restart_refill, gpus,
    )
    ok, summary = run_reprocess_flow(
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
        **_robustness_params(
            max_pages_per_pdf, max_page_error_rate, drop_on_page_errors, pdf_password,
            pdf_password_secret, server_unavailable_after, s3_retry_mode, result_storage,
        ),
    )
    _print_summary(summary, workspace, json_out=json_out)
    raise typer.Exit(0 if ok else 1)


def _print_summary(summary: dict[str, Any], workspace: str, *, json_out: bool) -> None:
    if json_out:
        typer.echo(json.dumps(summary, indent=2))
        return
    elapsed = float(summary.get("elapsed_seconds") or 0.0)
    pages = int(summary.get("pages") or 0)
    rate = pages / elapsed if elapsed > 0 else 0.0
    typer.echo(
        f"PDFs ok: {summary.get('pdfs_ok', 0)}  failed: {summary.get('pdfs_failed', 0)}  "
        f"skipped: {summary.get('pdfs_skipped', 0)}  pages: {pages}  "
        f"fallback pages: {summary.get('fallback_pages', 0)}  {rate:.2f} pages/s"
    )
    for failure in summary.get("failed", []):
        typer.echo(f"  FAILED {failure['source']}: {failure['reason']} ({failure['detail']})")
    for flagged in summary.get("flagged", []):
        typer.echo(f"  FLAGGED {flagged['source']}: {flagged['reason']} ({flagged['detail']})")
    typer.echo(f"results: {workspace.rstrip('/')}/results/  ledger: {workspace.rstrip('/')}/ledger/")
    if summary.get("chart"):
        typer.echo(f"run chart: {summary['chart']}")


@app.command()
def demo(
    directory: Annotated[Path, typer.Option("--dir", help="Where to put sample PDFs and the workspace.")] = Path("pagegate-demo"),
    pdfs: Annotated[int, typer.Option(help="Good sample PDFs to generate (7 broken ones are added).")] = 16,
) -> None:
    """Generate sample PDFs, start the simulator, and OCR them on embedded defaults."""
    from pagegate.cli.demo import run_demo

    raise typer.Exit(run_demo(directory.resolve(), good=pdfs, run=run_flow))


if __name__ == "__main__":
    app()
