"""The settings of one run, as plain data.

The CLI, the Prefect flow's parameters and the tests all build a `RunConfig`; the
library below never reads the environment or argv itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pagegate.server.managed import ManagedServerConfig
from pagegate.server.target import DEFAULT_SERVER_URL

S3_RETRY_MODES: tuple[str, ...] = ("standard", "adaptive", "legacy")  # botocore's retry modes


@dataclass(frozen=True)
class RunConfig:
    """Everything one `ocr_pdfs` run needs to know. Defaults follow olmOCR where it has one."""

    sources: tuple[str, ...]
    workspace: str
    server_url: str = DEFAULT_SERVER_URL
    model: str = "olmocr"                     # served model name; olmOCR serves as "olmocr"
    profile: str = "olmocr-2"
    api_key: str | None = None
    pages_per_group: int = 500                # olmOCR --pages_per_group
    workers: int = 20                         # group tasks at once (olmOCR --workers)
    max_concurrent_requests: int = 1600       # olmOCR --max_concurrent_requests; used when no gate
    markdown: bool = False
    target_longest_image_dim: int = 1288      # olmOCR --target_longest_image_dim
    max_page_retries: int = 8                 # olmOCR --max_page_retries
    max_page_error_rate: float = 0.004        # olmOCR --max_page_error_rate (1/250)
    drop_on_page_errors: bool = False         # over the rate: drop the document (olmOCR) or keep it flagged
    max_pages_per_pdf: int | None = None
    pdf_password: str | None = field(default=None, repr=False)  # never in a log line or repr
    request_timeout_seconds: float = 600.0    # one chat completion, queueing included
    server_unavailable_after_seconds: float = 1800.0
    capacity_backoff_max_seconds: float = 30.0  # longest pause between capacity retries (jittered)
    server_urls: tuple[str, ...] = ()         # several servers (one gate each, a router); else server_url
    download_concurrency: int = 8             # PDFs fetched at once per group
    skip_committed: bool = True
    redo_flagged: bool = False                # reprocess: a committed PDF with a ledger record is redone
    s3_retry_mode: str = "standard"           # botocore retry mode for S3 (standard or adaptive)
    run_id: str | None = None                 # the Prefect flow run, recorded in ledger records
    gate_block: str | None = None             # name of a saved AdmissionGate block
    gate_overrides: dict[str, float | int | bool] = field(default_factory=dict)
    use_gate: bool = True
    managed_server: ManagedServerConfig | None = None  # launch and supervise vLLM; server_url then follows it

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("at least one source is required")
        if self.pages_per_group < 1:
            raise ValueError("pages_per_group must be at least 1")
        if self.workers < 1:
            raise ValueError("workers must be at least 1")
        if self.max_concurrent_requests < 1:
            raise ValueError("max_concurrent_requests must be at least 1")
        if not 0.0 <= self.max_page_error_rate <= 1.0:
            raise ValueError("max_page_error_rate must be within [0, 1]")
        if self.max_page_retries < 1:
            raise ValueError("max_page_retries must be at least 1")
        if self.max_pages_per_pdf is not None and self.max_pages_per_pdf < 1:
            raise ValueError("max_pages_per_pdf must be at least 1")
        if self.capacity_backoff_max_seconds <= 0:
            raise ValueError("capacity_backoff_max_seconds must be positive")
        if len(set(self.server_urls)) < len(self.server_urls):
            raise ValueError("server_urls lists a server twice")
        if self.s3_retry_mode not in S3_RETRY_MODES:
            raise ValueError(f"s3_retry_mode must be one of {', '.join(S3_RETRY_MODES)}")

    @property
    def servers(self) -> tuple[str, ...]:
        """Every server pages may go to: server_urls when given, else server_url."""
        return self.server_urls or (self.server_url,)
