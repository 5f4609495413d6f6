"""The admission gate's settings as a Prefect Block, editable in the UI.

The Block is configuration only. Prefect returns a fresh instance on every load and
pydantic models do not carry asyncio objects across event loops, so the live gate is
built from `to_config()` inside the flow's own loop (pagegate.admission.Gate).

Register with:  prefect block register -m pagegate.tasks.admission_block
"""

from __future__ import annotations

from typing import Any, ClassVar

from prefect.blocks.core import Block
from pydantic import Field, GetJsonSchemaHandler
from pydantic_core import CoreSchema

from pagegate.admission.policy import GateConfig
from pagegate.server.metrics import metrics_url_for

_DEFAULTS = GateConfig()


class AdmissionGate(Block):
    """How pagegate admits page requests to one vLLM server (see docs/admission.md)."""

    _block_type_slug: ClassVar[str] = "pagegate-admission-gate"
    _block_type_name: ClassVar[str] = "pagegate Admission Gate"
    _description: ClassVar[str] = (
        "Settings of pagegate's admission gate: when a new unit of pages may be released to "
        "the vLLM server (peak ratio, cooldown, progress) and the limits that pace pages "
        "on the wire (KV ceiling, in-flight cap, metric freshness)."
    )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        """Keep the UI's block picker working.

        Prefect checks a block parameter against oneOf(the block's fields, {"$ref": ...}).
        Every field here has a default, so a bare {"$ref": ...} would match both branches
        and be refused; saying the fields branch never carries "$ref" makes it match one.
        """
        schema: dict[str, Any] = handler(core_schema)
        handler.resolve_ref_schema(schema)["not"] = {"required": ["$ref"]}
        return schema

    metrics_url: str | None = Field(
        default=None,
        description=(
            "Prometheus /metrics URL of the vLLM server. Empty: derived from the server's "
            "base URL (http://host:8000/v1 -> http://host:8000/metrics)."
        ),
    )
    peak_ratio: float = Field(
        default=_DEFAULTS.peak_ratio,
        ge=0.0,
        le=1.0,
        description=(
            "No new unit is released while the server's waiting queue is above this "
            "fraction of the peak number of running requests (olmOCR: 0.1)."
        ),
    )
    cooldown_seconds: float = Field(
        default=_DEFAULTS.cooldown_seconds,
        ge=0.0,
        description="Minimum seconds between two unit releases (olmOCR: 30).",
    )
    require_progress: bool = Field(
        default=_DEFAULTS.require_progress,
        description="Release a new unit only after a page of the previous unit has completed.",
    )
    max_in_flight_pages: int = Field(
        default=_DEFAULTS.max_in_flight_pages,
        ge=1,
        description=(
            "Hard cap on page requests in flight, whatever the adaptive limit says "
            "(olmOCR's --max_concurrent_requests: 1600). Raise it for data-parallel servers."
        ),
    )
    kv_cache_ceiling: float = Field(
        default=_DEFAULTS.kv_cache_ceiling,
        gt=0.0,
        le=1.0,
        description=(
            "Above this KV-cache usage (0-1) the gate stops growing its limit and drains the "
            "server's queue, so new admissions cannot force preemptions."
        ),
    )
    page_latency_limit_seconds: float | None = Field(
        default=_DEFAULTS.page_latency_limit_seconds,
        gt=0.0,
        description=(
            "While pages take longer than this on average, the gate stops growing its limit "
            "and holds it at what the server completes in this time: more pages in flight "
            "would only lengthen each one until the longest time out. The run's request "
            "timeout / 4 applies when it is shorter. Empty: no limit."
        ),
    )
    poll_interval_seconds: float = Field(
        default=_DEFAULTS.poll_interval_seconds,
        gt=0.0,
        description="Seconds between two scrapes of the server's /metrics.",
    )
    stale_after_seconds: float = Field(
        default=_DEFAULTS.stale_after_seconds,
        gt=0.0,
        description=(
            "A reading older than this freezes releases and pauses page dispatch; "
            "must exceed the poll interval."
        ),
    )
    scrape_timeout_seconds: float = Field(
        default=_DEFAULTS.scrape_timeout_seconds,
        gt=0.0,
        description="Timeout of one /metrics scrape (vLLM can take ~0.7 s while decoding images).",
    )
    peak_half_life_seconds: float = Field(
        default=_DEFAULTS.peak_half_life_seconds,
        gt=0.0,
        description="Half-life of the remembered peak of running requests.",
    )
    unit_pages: int = Field(
        default=_DEFAULTS.unit_pages,
        ge=1,
        description="Pages of credit one release grants, at least (more when two cooldowns of the measured drain are more).",
    )
    initial_concurrency: int = Field(
        default=_DEFAULTS.initial_concurrency,
        ge=1,
        description="Starting value of the adaptive in-flight limit (grows by slow start).",
    )
    drain_window_seconds: float = Field(
        default=_DEFAULTS.drain_window_seconds,
        gt=0.0,
        description=(
            "Memory of the measured drain rate and page latency, which size the units. "
            "Scale it with the cooldown when pages take well under a second."
        ),
    )
    unavailable_after_seconds: float | None = Field(
        default=_DEFAULTS.unavailable_after_seconds,
        gt=0.0,
        description=(
            "After this long without a usable reading, waiting pages fail with "
            "ServerUnavailableError instead of waiting forever. The run's "
            "server_unavailable_after_seconds applies when it is shorter. Empty: the run's."
        ),
    )
    hang_after_seconds: float | None = Field(
        default=None,
        gt=0.0,
        description=(
            "Launched servers only: restart the server when requests wait and no token has "
            "been generated for this many seconds (a hung engine). Empty: 180. A value in "
            "the flow's launch_server wins."
        ),
    )
    restart_budget: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Launched servers only: restarts allowed in a burst; one is earned back every "
            "restart_refill_seconds (olmOCR: 5 per job, never earned back). Empty: 5."
        ),
    )
    restart_refill_seconds: float | None = Field(
        default=None,
        gt=0.0,
        description="Launched servers only: seconds to earn one restart back. Empty: 600.",
    )

    def to_config(self) -> GateConfig:
        """The runtime configuration (validated: raises ValueError on inconsistent values)."""
        return GateConfig(
            peak_ratio=self.peak_ratio,
            cooldown_seconds=self.cooldown_seconds,
            require_progress=self.require_progress,
            max_in_flight_pages=self.max_in_flight_pages,
            kv_cache_ceiling=self.kv_cache_ceiling,
            page_latency_limit_seconds=self.page_latency_limit_seconds,
            poll_interval_seconds=self.poll_interval_seconds,
            stale_after_seconds=self.stale_after_seconds,
            scrape_timeout_seconds=self.scrape_timeout_seconds,
            peak_half_life_seconds=self.peak_half_life_seconds,
            unit_pages=self.unit_pages,
            initial_concurrency=self.initial_concurrency,
            drain_window_seconds=self.drain_window_seconds,
            unavailable_after_seconds=self.unavailable_after_seconds,
        )

    def supervision(self) -> dict[str, float | int]:
        """The watchdog settings it sets, as `launch_server` names (unset ones left out)."""
        values = {
            "hang_after_seconds": self.hang_after_seconds,
            "restart_budget": self.restart_budget,
            "restart_refill_seconds": self.restart_refill_seconds,
        }
        return {k: v for k, v in values.items() if v is not None}

    def resolve_metrics_url(self, server_base_url: str) -> str:
        """The configured metrics URL, or the one derived from the server's base URL."""
        return self.metrics_url or metrics_url_for(server_base_url)
