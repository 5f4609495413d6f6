"""The settings of one run, and of one scale-out planner run, as plain data.

Every default is written here once. The CLI's options (pagegate.cli), the flows'
parameter defaults (flows/: Prefect builds the UI's run form from them) and the
benchmarks read these fields by name (`RunConfig.pages_per_group`);
tests/test_run_defaults.py fails when one of them drifts. The library below never reads
the environment or argv itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pagegate.io.s3 import S3Credentials
from pagegate.server.managed import ManagedServerConfig
from pagegate.server.target import DEFAULT_SERVED_NAME, DEFAULT_SERVER_URL
from pagegate.vlm.profiles import DEFAULT_PROFILE, get_profile

S3_RETRY_MODES: tuple[str, ...] = ("standard", "adaptive", "legacy")  # botocore's retry modes


@dataclass(frozen=True)
class RunConfig:
    """Everything one `ocr_pdfs` run needs to know. Defaults follow olmOCR where it has one."""

    sources: tuple[str, ...]
    workspace: str
    server_url: str = DEFAULT_SERVER_URL
    model: str = DEFAULT_SERVED_NAME          # served model name; olmOCR serves as "olmocr"
    profile: str = DEFAULT_PROFILE            # the model's contract (pagegate.vlm.profiles)
    api_key: str | None = None
    pages_per_group: int = 500                # olmOCR --pages_per_group
    workers: int = 20                         # group tasks at once (olmOCR --workers)
    max_concurrent_requests: int = 1600       # olmOCR --max_concurrent_requests; used when no gate
    markdown: bool = False
    markdown_root: str | None = None          # .md paths are relative to it (pagegate.output.options)
    layout: bool = False                      # a layout/<id>.jsonl sidecar of boxes, for profiles that give them
    target_longest_image_dim: int = 1288      # olmOCR --target_longest_image_dim
    max_page_retries: int = 8                 # olmOCR --max_page_retries
    max_page_error_rate: float = 0.004        # olmOCR --max_page_error_rate (1/250)
    drop_on_page_errors: bool = False         # over the rate: drop the document (olmOCR) or keep it flagged
    max_fallback_share: float = 0.5           # more of a run's pages from the text layer: the run fails
    max_pages_per_pdf: int | None = None
    pdf_password: str | None = field(default=None, repr=False)  # never in a log line or repr
    s3_credentials: S3Credentials | None = field(default=None, repr=False)  # else the AWS environment
    request_timeout_seconds: float = 600.0    # one chat completion, queueing included
    server_unavailable_after_seconds: float = 1800.0
    capacity_backoff_max_seconds: float = 30.0  # longest pause between capacity retries (jittered)
    server_urls: tuple[str, ...] = ()         # several servers (one gate each, a router); else server_url
    download_concurrency: int = 8             # PDFs being fetched and inspected at once (the run's)
    render_workers: int | None = None         # render worker processes; None: the cores this process may use
    pdf_memory_budget_mb: int = 64            # downloaded PDF bytes held in memory at once; the rest wait or go to disk
    spool_pdfs_over_mb: float = 32.0          # larger PDFs are opened from a file, never held in memory
    render_timeout_seconds: float = 120.0     # one page render or inspection (olmOCR gives pdftoppm 120 s)
    render_memory_limit_mb: int | None = 1024  # address-space limit of each render worker (RLIMIT_AS)
    skip_committed: bool = True
    redo_flagged: bool = False                # reprocess: a committed PDF with a ledger record is redone
    s3_retry_mode: str = "standard"           # botocore retry mode for S3 (standard or adaptive)
    run_id: str | None = None                 # the Prefect flow run, recorded in ledger records
    run_name: str | None = None               # its name, as other runs over the workspace see it
    claim_lease_seconds: float = 60.0         # a claim on a group lapses after this long without a heartbeat
    gate_block: str | None = None             # name of a saved AdmissionGate block
    gate_overrides: dict[str, float | int | bool] = field(default_factory=dict)
    use_gate: bool = True
    managed_server: ManagedServerConfig | None = None  # launch and supervise vLLM; server_url then follows it

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("at least one source is required")
        get_profile(self.profile)  # an unknown name fails here, naming the known ones
        if self.pages_per_group < 1:
            raise ValueError("pages_per_group must be at least 1")
        if self.workers < 1:
            raise ValueError("workers must be at least 1")
        if self.max_concurrent_requests < 1:
            raise ValueError("max_concurrent_requests must be at least 1")
        if not 0.0 <= self.max_page_error_rate <= 1.0:
            raise ValueError("max_page_error_rate must be within [0, 1]")
        if not 0.0 <= self.max_fallback_share <= 1.0:
            raise ValueError("max_fallback_share must be within [0, 1]")
        if self.max_page_retries < 1:
            raise ValueError("max_page_retries must be at least 1")
        if self.max_pages_per_pdf is not None and self.max_pages_per_pdf < 1:
            raise ValueError("max_pages_per_pdf must be at least 1")
        if self.capacity_backoff_max_seconds <= 0:
            raise ValueError("capacity_backoff_max_seconds must be positive")
        if self.claim_lease_seconds <= 0:
            raise ValueError("claim_lease_seconds must be positive")
        if len(set(self.server_urls)) < len(self.server_urls):
            raise ValueError("server_urls lists a server twice")
        if self.s3_retry_mode not in S3_RETRY_MODES:
            raise ValueError(f"s3_retry_mode must be one of {', '.join(S3_RETRY_MODES)}")
        if self.render_workers is not None and self.render_workers < 1:
            raise ValueError("render_workers must be at least 1")
        if self.pdf_memory_budget_mb < 1 or self.spool_pdfs_over_mb <= 0:
            raise ValueError("pdf_memory_budget_mb and spool_pdfs_over_mb must be positive")
        if self.render_timeout_seconds <= 0 or self.download_concurrency < 1:
            raise ValueError("render_timeout_seconds and download_concurrency must be positive")

    @property
    def servers(self) -> tuple[str, ...]:
        """Every server pages may go to: server_urls when given, else server_url."""
        return self.server_urls or (self.server_url,)


@dataclass(frozen=True)
class PlannerConfig:
    """How the `ocr-planner` flow (and `pagegate plan`) cuts a job into shards and runs them."""

    deployment: str = "ocr-pdfs/shard"        # the deployment each shard runs as (prefect.yaml)
    pages_per_shard: int = 20_000             # target estimated pages per shard (at most twice)
    pdfs_per_shard: int = 1_000               # target PDFs per shard, whichever comes first
    max_running_shards: int = 8               # shard runs not yet final at once
    sample_size: int = 128                    # PDFs whose page counts fit pages-per-byte
    sample_lookahead: int = 10_000            # the sample is drawn from this many first PDFs
    bytes_per_page: float | None = None       # known: no sampling
    shard_retries: int = 2                    # retries of a crashed or dead shard run
    stale_after_seconds: float | None = 180.0  # no heartbeat this long: dead (None: never)
    poll_seconds: float = 5.0                 # how often the shard runs are looked at
    rerun_salt: str = ""                      # changed: identical shards run again as new runs
    s3_retry_mode: str = RunConfig.s3_retry_mode

    def __post_init__(self) -> None:
        if self.pages_per_shard < 1 or self.pdfs_per_shard < 1:
            raise ValueError("pages_per_shard and pdfs_per_shard must be at least 1")
        if self.max_running_shards < 1:
            raise ValueError("max_running_shards must be at least 1")
        if self.shard_retries < 0:
            raise ValueError("shard_retries must not be negative")
        if self.poll_seconds <= 0:
            raise ValueError("poll_seconds must be positive")
        if self.s3_retry_mode not in S3_RETRY_MODES:
            raise ValueError(f"s3_retry_mode must be one of {', '.join(S3_RETRY_MODES)}")
