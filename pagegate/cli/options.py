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
from pagegate.vlm.profiles import DEFAULT_PROFILE, PROFILES, choose_profile

if TYPE_CHECKING:
    from pydantic import SecretStr

    from pagegate.ocr.preflight import Preflight

# Help panels (`pagegate run --help`), in the order a user meets them.
OUTPUT = "Sources and output"
SERVER = "Server"
PAGES = "Pages and PDFs"
GATE = "Gate"
S3 = "S3"
LAUNCH = "Launched server (--model without --server)"

# The run's target server.
ServerOpt = Annotated[list[str] | None, typer.Option(metavar="URL", help="OpenAI base URL of an external vLLM server (unless --model launches one). Repeat for several servers (e.g. one per GPU): pages go to the least-loaded one.", rich_help_panel=SERVER, show_default=DEFAULT_SERVER_URL)]
ProfileOpt = Annotated[str | None, typer.Option(help=f"The model's profile: {', '.join(PROFILES)} (docs/models.md).", rich_help_panel=SERVER, show_default="the one --model names, else " + DEFAULT_PROFILE)]
LayoutOpt = Annotated[bool, typer.Option("--layout", help="Also write layout/<id>.jsonl: each page's blocks with boxes in PDF points (profiles that give layout).", rich_help_panel=OUTPUT, metavar="", show_default="off")]
ModelOpt = Annotated[str | None, typer.Option(help="With --server: its served model name. Without: launch and supervise `vllm serve MODEL`.", rich_help_panel=SERVER, show_default=DEFAULT_SERVED_NAME)]

# Work sizes and the gate.
PagesPerGroupOpt = Annotated[int, typer.Option(min=1, help="Target pages per group task.", rich_help_panel=PAGES)]
WorkersOpt = Annotated[int, typer.Option(min=1, help="Group tasks at once.", rich_help_panel=PAGES)]
MarkdownOpt = Annotated[bool, typer.Option("--markdown", help="Also write one .md per PDF.", rich_help_panel=OUTPUT, metavar="", show_default="off")]
MaxPageRetriesOpt = Annotated[int, typer.Option(min=1, help="Model attempts per page before text fallback.", rich_help_panel=PAGES)]
GateOpt = Annotated[str | None, typer.Option(help="Name of a saved AdmissionGate block.", rich_help_panel=GATE, show_default='built-in settings')]
NoGateOpt = Annotated[bool, typer.Option("--no-gate", help="Disable the gate; cap requests only.", rich_help_panel=GATE, metavar="", show_default="off")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.", rich_help_panel=OUTPUT, metavar="", show_default="off")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Print the traceback of an error too (the log file keeps it either way).", rich_help_panel=OUTPUT, metavar="", show_default="off")]

# Runs that share a workspace (pagegate.claims).
ClaimLeaseOpt = Annotated[float, typer.Option(min=0.001, help="Seconds a run may go without renewing its claims on groups before other runs over the workspace take them over.", rich_help_panel=OUTPUT)]

# Rendering and the memory PDFs take.
RenderWorkersOpt = Annotated[int | None, typer.Option(min=1, help="Render worker processes, each with its own pdfium (one per core pagegate may use).", rich_help_panel=PAGES, show_default='one per core')]
PdfMemoryBudgetOpt = Annotated[int, typer.Option("--pdf-memory-budget", min=1, help="MB of PDF bytes held in memory at once; larger PDFs are read from a file.", rich_help_panel=PAGES)]

# How bad inputs and outages are handled.
MaxPagesOpt = Annotated[int | None, typer.Option(min=1, help="PDFs with more pages go to the ledger (too_many_pages).", rich_help_panel=PAGES, show_default='no cap')]
MaxPageErrorRateOpt = Annotated[float, typer.Option(min=0.0, max=1.0, help="Share of fallback pages above which a PDF gets a page_error_rate record.", rich_help_panel=PAGES)]
# reprocess: empty takes the option the workspace's last run recorded (pagegate.output.options).
RecordedMarkdownOpt = Annotated[bool | None, typer.Option("--markdown/--no-markdown", help="Write one .md per PDF, or not.", rich_help_panel=OUTPUT, show_default="as the workspace's run")]
RecordedDropOpt = Annotated[bool | None, typer.Option("--drop-on-page-errors/--keep-on-page-errors", help="Over the rate: don't write the document, or write it with its fallback pages flagged.", rich_help_panel=PAGES, show_default="as the workspace's run")]
DropOnPageErrorsOpt = Annotated[bool, typer.Option("--drop-on-page-errors", help="Over the rate: don't write the document (default: write it, fallback pages flagged).", rich_help_panel=PAGES, metavar="", show_default="off")]
MaxFallbackShareOpt = Annotated[float, typer.Option(min=0.0, max=1.0, help="Share of the run's pages that may fall back to the text layer; above it the run fails (exit 1) saying the model did not read them.", rich_help_panel=PAGES)]
PdfPasswordOpt = Annotated[str | None, typer.Option(envvar="PAGEGATE_PDF_PASSWORD", show_default=False, help="Password for encrypted PDFs (prefer the env var; never logged).", rich_help_panel=PAGES)]
PdfPasswordSecretOpt = Annotated[str | None, typer.Option(help="Name of a Prefect Secret block holding the PDF password.", rich_help_panel=PAGES, show_default='none')]
UnavailableAfterOpt = Annotated[float, typer.Option("--server-unavailable-after", min=0.0, help="Seconds a server may refuse or be unreachable (capacity errors, gate paused) before the PDFs waiting on it are recorded as server_unavailable; the run never exits for it.", rich_help_panel=SERVER)]
S3RetryModeOpt = Annotated[str, typer.Option(callback=lambda mode: _one_of(mode, S3_RETRY_MODES), help="botocore retry mode for S3: standard or adaptive.", rich_help_panel=S3)]
AwsCredentialsOpt = Annotated[str | None, typer.Option(metavar="BLOCK", help="S3 credentials (and endpoint) for sources and workspace from a prefect-aws block: an AwsCredentials block's name, or aws-credentials/NAME, s3-bucket/NAME, minio-credentials/NAME (default: the AWS environment).", rich_help_panel=S3, show_default='the AWS environment')]
ResultStorageOpt = Annotated[str | None, typer.Option(help="Where task results persist for retries: s3://bucket/prefix, a path, or a block type/name.", rich_help_panel=OUTPUT, show_default="Prefect's")]

# A server pagegate launches itself (`run --model MODEL` without --server).
_LAUNCH = "Launched server: "
VllmCommandOpt = Annotated[str | None, typer.Option(help=_LAUNCH + "command line, {model} marks the model.", rich_help_panel=LAUNCH, show_default=DEFAULT_COMMAND)]
VllmPortOpt = Annotated[int | None, typer.Option(min=1, max=65535, help=_LAUNCH + "port.", rich_help_panel=LAUNCH, show_default=str(VllmSettings.port))]
ServedNameOpt = Annotated[str | None, typer.Option(help=_LAUNCH + "served model name.", rich_help_panel=LAUNCH, show_default=VllmSettings.served_model_name)]
GpuMemOpt = Annotated[float | None, typer.Option(min=0.0, max=1.0, help=_LAUNCH + "vLLM --gpu-memory-utilization.", rich_help_panel=LAUNCH, show_default="vLLM's")]
MaxModelLenOpt = Annotated[int | None, typer.Option(min=1, help=_LAUNCH + "vLLM --max-model-len.", rich_help_panel=LAUNCH, show_default="the model's")]
TpOpt = Annotated[int | None, typer.Option(min=1, help=_LAUNCH + "vLLM --tensor-parallel-size.", rich_help_panel=LAUNCH, show_default="vLLM's (1)")]
DpOpt = Annotated[int | None, typer.Option(min=1, help=_LAUNCH + "vLLM --data-parallel-size.", rich_help_panel=LAUNCH, show_default="vLLM's (1)")]
MaxNumSeqsOpt = Annotated[int | None, typer.Option(min=1, help=_LAUNCH + "vLLM --max-num-seqs.", rich_help_panel=LAUNCH, show_default="vLLM's")]
LimitMmOpt = Annotated[str | None, typer.Option(help=_LAUNCH + "vLLM --limit-mm-per-prompt.", rich_help_panel=LAUNCH, show_default=str(VllmSettings.limit_mm_per_prompt))]
VllmArgOpt = Annotated[list[str] | None, typer.Option(help=_LAUNCH + "extra argument passed verbatim (repeatable; --vllm-arg=--enforce-eager).", rich_help_panel=LAUNCH, show_default='none')]
HangAfterOpt = Annotated[float | None, typer.Option(min=0.0, help=_LAUNCH + "restart when work waits and no token is generated for this many seconds.", rich_help_panel=LAUNCH, show_default=f"{WatchLimits.hang_after:g}")]
RestartBudgetOpt = Annotated[int | None, typer.Option(min=0, help=_LAUNCH + "restarts allowed at once.", rich_help_panel=LAUNCH, show_default=str(WatchdogConfig.restart_capacity))]
RestartRefillOpt = Annotated[float | None, typer.Option(min=0.0, help=_LAUNCH + "seconds to earn one restart back.", rich_help_panel=LAUNCH, show_default=f"{WatchdogConfig.restart_refill_seconds:g}")]
GpusOpt = Annotated[str | None, typer.Option(help=_LAUNCH + "one server per GPU, e.g. 0,1 (CUDA_VISIBLE_DEVICES each, ports from --vllm-port up; 0+1,2+3: two GPUs per server); pages go to the least-loaded.", rich_help_panel=LAUNCH, show_default='one server, all GPUs')]


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


def chosen_profile(profile: str | None, model: str | None) -> str:
    """--profile, or the one --model names, else the default; a bad name is a usage error."""
    try:
        return choose_profile(profile, model)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--profile") from None
