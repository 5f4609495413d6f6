"""The options `pagegate run` and `pagegate reprocess` share, and the flow parameters they make.

Defaults shown in the help come from where they are defined (RunConfig for the run, the
launcher's settings for a launched server), never retyped here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from pagegate.config import S3_RETRY_MODES
from pagegate.server.settings import DEFAULT_COMMAND, VllmSettings
from pagegate.server.target import DEFAULT_SERVED_NAME, DEFAULT_SERVER_URL
from pagegate.server.watchdog import WatchdogConfig, WatchLimits

if TYPE_CHECKING:
    from pydantic import SecretStr

    from pagegate.ocr.preflight import Preflight

# The run's target server.
ServerOpt = Annotated[list[str] | None, typer.Option(metavar="URL", help=f"OpenAI base URL of an external vLLM server (default {DEFAULT_SERVER_URL} unless --model launches one). Repeat for several servers (e.g. one per GPU): pages go to the least-loaded one.")]
ModelOpt = Annotated[str | None, typer.Option(help=f"With --server: its served model name (default {DEFAULT_SERVED_NAME}). Without: launch and supervise `vllm serve MODEL`.")]

# Work sizes and the gate.
PagesPerGroupOpt = Annotated[int, typer.Option(min=1, help="Target pages per group task.")]
WorkersOpt = Annotated[int, typer.Option(min=1, help="Group tasks at once.")]
MarkdownOpt = Annotated[bool, typer.Option("--markdown", help="Also write one .md per PDF.")]
MaxPageRetriesOpt = Annotated[int, typer.Option(min=1, help="Model attempts per page before text fallback.")]
GateOpt = Annotated[str | None, typer.Option(help="Name of a saved AdmissionGate block.")]
NoGateOpt = Annotated[bool, typer.Option("--no-gate", help="Disable the gate; cap requests only.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Print the traceback of an error too (the log file keeps it either way).")]

# Rendering and the memory PDFs take.
RenderWorkersOpt = Annotated[int | None, typer.Option(min=1, help="Render worker processes, each with its own pdfium (default: one per core pagegate may use).")]
PdfMemoryBudgetOpt = Annotated[int, typer.Option("--pdf-memory-budget", min=1, help="MB of PDF bytes held in memory at once; larger PDFs are read from a file.")]

# How bad inputs and outages are handled.
MaxPagesOpt = Annotated[int | None, typer.Option(min=1, help="PDFs with more pages go to the ledger (too_many_pages).")]
MaxPageErrorRateOpt = Annotated[float, typer.Option(min=0.0, max=1.0, help="Share of fallback pages above which a PDF gets a page_error_rate record.")]
DropOnPageErrorsOpt = Annotated[bool, typer.Option("--drop-on-page-errors", help="Over the rate: don't write the document (default: write it, fallback pages flagged).")]
MaxFallbackShareOpt = Annotated[float, typer.Option(min=0.0, max=1.0, help="Share of the run's pages that may fall back to the text layer; above it the run fails (exit 1) saying the model did not read them.")]
PdfPasswordOpt = Annotated[str | None, typer.Option(envvar="PAGEGATE_PDF_PASSWORD", show_default=False, help="Password for encrypted PDFs (prefer the env var; never logged).")]
PdfPasswordSecretOpt = Annotated[str | None, typer.Option(help="Name of a Prefect Secret block holding the PDF password.")]
UnavailableAfterOpt = Annotated[float, typer.Option("--server-unavailable-after", min=0.0, help="Seconds a server may refuse or be unreachable (capacity errors, gate paused) before the PDFs waiting on it are recorded as server_unavailable; the run never exits for it.")]
S3RetryModeOpt = Annotated[str, typer.Option(callback=lambda mode: _one_of(mode, S3_RETRY_MODES), help="botocore retry mode for S3: standard or adaptive.")]
AwsCredentialsOpt = Annotated[str | None, typer.Option(metavar="BLOCK", help="S3 credentials (and endpoint) for sources and workspace from a prefect-aws block: an AwsCredentials block's name, or aws-credentials/NAME, s3-bucket/NAME, minio-credentials/NAME (default: the AWS environment).")]
ResultStorageOpt = Annotated[str | None, typer.Option(help="Where task results persist for retries: s3://bucket/prefix, a path, or a block type/name.")]

# A server pagegate launches itself (`run --model MODEL` without --server).
_LAUNCH = "Launched server: "
VllmCommandOpt = Annotated[str | None, typer.Option(help=_LAUNCH + f"command line, {{model}} marks the model (default: {DEFAULT_COMMAND}).")]
VllmPortOpt = Annotated[int | None, typer.Option(min=1, max=65535, help=_LAUNCH + f"port (default {VllmSettings.port}).")]
ServedNameOpt = Annotated[str | None, typer.Option(help=_LAUNCH + f"served model name (default {VllmSettings.served_model_name}).")]
GpuMemOpt = Annotated[float | None, typer.Option(min=0.0, max=1.0, help=_LAUNCH + "vLLM --gpu-memory-utilization.")]
MaxModelLenOpt = Annotated[int | None, typer.Option(min=1, help=_LAUNCH + "vLLM --max-model-len.")]
TpOpt = Annotated[int | None, typer.Option(min=1, help=_LAUNCH + "vLLM --tensor-parallel-size.")]
DpOpt = Annotated[int | None, typer.Option(min=1, help=_LAUNCH + "vLLM --data-parallel-size.")]
MaxNumSeqsOpt = Annotated[int | None, typer.Option(min=1, help=_LAUNCH + "vLLM --max-num-seqs.")]
LimitMmOpt = Annotated[str | None, typer.Option(help=_LAUNCH + f"vLLM --limit-mm-per-prompt (default {VllmSettings.limit_mm_per_prompt}).")]
VllmArgOpt = Annotated[list[str] | None, typer.Option(help=_LAUNCH + "extra argument passed verbatim (repeatable; --vllm-arg=--enforce-eager).")]
HangAfterOpt = Annotated[float | None, typer.Option(min=0.0, help=_LAUNCH + f"restart when work waits and no token is generated for this many seconds (default {WatchLimits.hang_after:g}).")]
RestartBudgetOpt = Annotated[int | None, typer.Option(min=0, help=_LAUNCH + f"restarts allowed at once (default {WatchdogConfig.restart_capacity}).")]
RestartRefillOpt = Annotated[float | None, typer.Option(min=0.0, help=_LAUNCH + f"seconds to earn one restart back (default {WatchdogConfig.restart_refill_seconds:g}).")]
GpusOpt = Annotated[str | None, typer.Option(help=_LAUNCH + "one server per GPU, e.g. 0,1 (CUDA_VISIBLE_DEVICES each, ports from --vllm-port up; 0+1,2+3: two GPUs per server); pages go to the least-loaded.")]


def _one_of(value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(allowed)}")
    return value


def gate_overrides(
    peak_ratio: float | None, cooldown: float | None, max_in_flight: int | None
) -> dict[str, Any]:
    """The `--gate-*` options given, as AdmissionGate field names (the flow's gate_overrides)."""
    pairs = {
        "peak_ratio": peak_ratio,
        "cooldown_seconds": cooldown,
        "max_in_flight_pages": max_in_flight,
    }
    return {k: v for k, v in pairs.items() if v is not None}


def run_target(
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


def secret(password: str | None) -> SecretStr | None:
    """The password as a pydantic SecretStr (masked in Prefect's parameter record)."""
    from pydantic import SecretStr

    return SecretStr(password) if password else None


def preflight_of(
    target: dict[str, Any], *, workspace: str, sources: list[str], s3_retry_mode: str,
    aws_credentials: str | None,
) -> Preflight:
    """The checks the CLI makes before Prefect starts (pagegate.ocr.preflight).

    S3 credentials named by a prefect-aws block need the Prefect API, so with
    --aws-credentials the S3 checks are left to the flow's own preflight.
    """
    from pagegate.ocr.preflight import Preflight

    servers: tuple[str, ...] = ()
    if not target.get("launch_server"):
        servers = tuple(target.get("server_urls") or (target["server_url"],))
    return Preflight(
        workspace=workspace, sources=tuple(sources), servers=servers, model=target["model"],
        s3_retry_mode=s3_retry_mode, check_s3=aws_credentials is None,
    )
