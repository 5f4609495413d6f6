"""What the simulated server hands out: finished requests, metrics snapshots, its errors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

FINISH_REASONS = ("stop", "length", "abort")


class EngineDeadError(RuntimeError):
    """The simulated server has crashed; it accepts and finishes nothing any more."""


class QueueFullError(RuntimeError):
    """The server holds `max_num_queued_reqs` requests already (vLLM answers 503)."""


class RequestTooLongError(ValueError):
    """max_tokens over max_model_len, or a prompt filling it (vLLM answers 400)."""


@dataclass(frozen=True)
class Finished:
    """One request the server completed, with the times a client would observe."""

    req_id: str
    arrived_at: float
    first_token_at: float
    finished_at: float
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    preemptions: int
    handed_over_at: float = 0.0
    """When the engine got it (the front end's work done); `arrived_at` for an engine alone."""
    scheduled_at: float = 0.0
    """When the engine first admitted it out of its waiting queue."""

    @property
    def latency(self) -> float:
        return self.finished_at - self.arrived_at

    def latencies(self) -> dict[str, float]:
        """vLLM's latency histograms' values for this request (vllm/v1/metrics/stats.py):
        e2e from arrival (vLLM starts it when the API server begins to render), queue time
        in the engine's waiting queue, inference from admission to the last token."""
        return {
            "e2e_request_latency": self.finished_at - self.arrived_at,
            "request_queue_time": self.scheduled_at - self.handed_over_at,
            "request_inference_time": self.finished_at - self.scheduled_at,
            "request_prefill_time": self.first_token_at - self.scheduled_at,
            "request_decode_time": self.finished_at - self.first_token_at,
        }


@dataclass(frozen=True)
class MetricsSnapshot:
    """One engine at `at`: its exact state, what its gauges say, and its configuration.

    `running`, `waiting` and `kv_blocks_used` are the scheduler's state right now; the
    `reported_*` fields are what vLLM's gauges show, which lag it by one engine step
    (published at the end of each step, before the next one admits: docs/simulator.md).
    """

    at: float
    running: int
    waiting: int
    kv_blocks_used: int
    kv_usage: float
    preemptions_total: int
    prompt_tokens_total: int
    generation_tokens_total: int
    recomputed_tokens_total: int
    request_success_total: Mapping[str, int]
    steps_total: int
    host_mem_mb: float
    crashed: bool
    crash_reason: str | None
    peak_waiting: int          # high-water marks since start: what a sampler could miss
    peak_kv_usage: float
    num_gpu_blocks: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    reported_running: int = 0
    reported_waiting: int = 0
    reported_kv_usage: float = 0.0


@dataclass(frozen=True)
class Refused:
    """A request the server answered with an error instead of a completion."""

    req_id: str
    at: float
    status: int
    message: str


@dataclass(frozen=True)
class NodeSnapshot:
    """The whole server at `at`: each engine's metrics and the front end's counts."""

    at: float
    engines: tuple[MetricsSnapshot, ...]
    in_front_end: int
    admission_rejections: Mapping[str, int]
    host_mem_mb: float
    crashed: bool
    crash_reason: str | None
    max_num_queued_reqs: int | None
    latency_totals: Mapping[str, tuple[float, int]] = field(default_factory=dict)
    """(sum of seconds, requests) of each of vLLM's latency histograms (`Finished.latencies`)."""

    def total(self, name: str) -> int:
        return sum(int(getattr(e, name)) for e in self.engines)

    @property
    def running(self) -> int:
        return self.total("running")

    @property
    def waiting(self) -> int:
        return self.total("waiting")

    @property
    def preemptions_total(self) -> int:
        return self.total("preemptions_total")

    @property
    def recomputed_tokens_total(self) -> int:
        return self.total("recomputed_tokens_total")

    @property
    def kv_usage(self) -> float:
        return max(e.kv_usage for e in self.engines)
