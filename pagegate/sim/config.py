"""`SimConfig`: which server to simulate, with what overrides and which faults."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from pagegate.sim.profiles import ServerProfile, get_server_profile

CUT_TOKENS = 32
"""Tokens a reply of the `cut_pages` fault runs to before it stops at its limit."""


@dataclass(frozen=True)
class SimConfig:
    """Which server to simulate and how. `None` keeps the profile's value; for the
    three limits (crash_waiting, host_mem_limit_mb, max_num_queued_reqs) 0 turns it off."""

    profile: str = "ci"
    max_num_seqs: int | None = None
    kv_blocks: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    crash_waiting: int | None = None
    host_mem_limit_mb: float | None = None
    max_num_queued_reqs: int | None = None
    api_server_count: int | None = None
    """API server processes in front of the engines (vLLM --api-server-count)."""
    data_parallel_size: int | None = None
    """Engines behind the front end (vLLM --data-parallel-size)."""
    max_new_tokens: int | None = None
    """The server's cap on every reply (vLLM --override-generation-config max_new_tokens)."""
    seed: int = 0
    time_scale: float = 1.0
    served_model_name: str = "olmocr"
    garbage_below_temperature: float = 0.0
    """Replies lose their front matter when the request temperature is below this."""
    rotate_landscape: bool = False
    """Landscape images get is_rotation_valid false and rotation_correction 90."""
    reject_status_every: int = 0
    """Every k-th chat request gets 503 before reaching the engine (0 = never)."""
    hang_after_requests: int = 0
    """Fault: the engine stops stepping once this many chat requests arrived (0 = never).
    The API, /health and /metrics still answer; requests wait forever and the token
    counters stay flat (vLLM #39863). SIGUSR1 to the process does the same at once."""
    pdfs: tuple[str, ...] = ()
    """PDFs (or folders of them) whose pages the simulator reads: a request showing one
    of their pages is answered with its text layer (pagegate.sim.pages)."""
    malformed_pages: str = ""
    """Fault: replies to corpus pages whose text matches this regex are malformed."""
    cut_pages: str = ""
    """Fault: replies to corpus pages whose text matches this regex run out of tokens
    (finish_reason "length") after CUT_TOKENS tokens."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.time_scale) and self.time_scale > 0):
            raise ValueError("time_scale must be a positive number")
        if self.reject_status_every < 0:
            raise ValueError("reject_status_every must be >= 0")
        if self.hang_after_requests < 0:
            raise ValueError("hang_after_requests must be >= 0")
        for name in ("malformed_pages", "cut_pages"):
            try:
                re.compile(getattr(self, name))
            except re.error as exc:
                raise ValueError(f"{name} is not a regular expression: {exc}") from None
        if not self.served_model_name:
            raise ValueError("served_model_name must not be empty")
        for name in ("crash_waiting", "host_mem_limit_mb", "max_num_queued_reqs"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0 (0 turns it off)")
        for name in ("api_server_count", "data_parallel_size", "max_new_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1")

    def malformed_pages_match(self, text: str) -> bool:
        return bool(self.malformed_pages) and re.search(self.malformed_pages, text) is not None

    def cut_pages_match(self, text: str) -> bool:
        return bool(self.cut_pages) and re.search(self.cut_pages, text) is not None

    def server_profile(self) -> ServerProfile:
        """The named profile with this config's overrides applied (validated again)."""
        base = get_server_profile(self.profile)
        changes: dict[str, Any] = {
            k: v
            for k, v in {
                "max_num_seqs": self.max_num_seqs,
                "num_gpu_blocks": self.kv_blocks,
                "max_num_batched_tokens": self.max_num_batched_tokens,
                "max_model_len": self.max_model_len,
                "data_parallel_size": self.data_parallel_size,
                "max_new_tokens": self.max_new_tokens,
            }.items()
            if v is not None
        }
        for name in ("crash_waiting", "host_mem_limit_mb", "max_num_queued_reqs"):
            value = getattr(self, name)
            if value is not None:
                changes[name] = value or None
        if self.api_server_count is not None and base.frontend is not None:
            changes["frontend"] = replace(base.frontend, api_server_count=self.api_server_count)
        return replace(base, **changes)
