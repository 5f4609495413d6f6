"""The vLLM server's state as its Prometheus /metrics page shows it: names, parser, URL.

Metric names are vLLM V1's (vllm/v1/metrics/loggers.py): `vllm:num_requests_waiting`,
`vllm:num_requests_running`, `vllm:kv_cache_usage_perc` (servers before PR #29330 export
the same gauge as `vllm:gpu_cache_usage_perc`), and the counters `vllm:num_preemptions_total` and
`vllm:generation_tokens_total`. Every engine of a data-parallel server exports its own
label set: queue gauges and counters are summed; KV usage is the maximum, because the
fullest engine is the one that preempts.

Samples are matched by exact name, so `vllm:num_requests_waiting_by_reason` (which a
prefix grep would also match) never adds to the waiting count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from prometheus_client.parser import text_string_to_metric_families

from pagegate.errors import MetricsError

WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
KV_USAGE = "vllm:kv_cache_usage_perc"
KV_USAGE_LEGACY = "vllm:gpu_cache_usage_perc"
PREEMPTIONS = "vllm:num_preemptions_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"

_WANTED = frozenset({WAITING, RUNNING, KV_USAGE, KV_USAGE_LEGACY, PREEMPTIONS, GENERATION_TOKENS})


@dataclass(frozen=True, slots=True, kw_only=True)
class Reading:
    """One scrape of the server's /metrics, summed over data-parallel engines.

    `at` is the gate clock's time when the scrape answered. Counters are None when the
    server does not export them (older vLLM, simulators); the signals built on them are
    then off. `healthy=False` lets a source report a server that answered but is unfit.
    """

    waiting: int
    running: int
    kv_usage: float
    at: float
    preemptions_total: float | None = None
    generation_tokens_total: float | None = None
    healthy: bool = True


def parse_vllm_metrics(text: str, *, at: float) -> Reading:
    """Turn a /metrics page into a `Reading` stamped `at`; raise MetricsError if unusable."""
    values: dict[str, list[float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in _WANTED:
                    values.setdefault(sample.name, []).append(float(sample.value))
    except ValueError as exc:  # the parser's way of saying "not exposition format"
        raise MetricsError(f"cannot parse metrics text: {exc}") from exc

    for name, found in values.items():
        if any(math.isnan(v) or math.isinf(v) for v in found):
            raise MetricsError(f"{name} is not a finite number")

    kv_name = KV_USAGE if KV_USAGE in values else KV_USAGE_LEGACY
    missing = [name for name in (WAITING, RUNNING, kv_name) if name not in values]
    if missing:
        raise MetricsError("metrics lack " + ", ".join(missing) + " (is this a vLLM server?)")

    def total(name: str) -> float | None:
        return sum(values[name]) if name in values else None

    return Reading(
        waiting=round(sum(values[WAITING])),
        running=round(sum(values[RUNNING])),
        kv_usage=max(values[kv_name]),
        at=at,
        preemptions_total=total(PREEMPTIONS),
        generation_tokens_total=total(GENERATION_TOKENS),
    )


def metrics_url_for(server_base_url: str) -> str:
    """The /metrics URL of the server behind an OpenAI-style base URL.

    "http://host:8000/v1" -> "http://host:8000/metrics"; a path prefix in front of /v1
    (a reverse proxy) is kept: "https://h/vllm/v1/" -> "https://h/vllm/metrics".
    """
    parts = urlsplit(server_base_url.strip())
    if not parts.scheme or not parts.netloc:
        raise ValueError(f"not an absolute http(s) URL: {server_base_url!r}")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, path + "/metrics", "", ""))
