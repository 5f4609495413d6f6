"""Run one admission strategy against a simulated vLLM server, over real loopback HTTP.

One strategy runs in one process (`python -m bench.harness SPEC_JSON OUT_JSON`), so its
peak RSS (`getrusage(RUSAGE_SELF).ru_maxrss`) is the client's alone. That process starts
its own simulator as a child (`python -m pagegate.sim --time-scale F`, via
`pagegate.sim.process.SimProcess`): on a 2-core machine the server model and uvicorn get
one core and the client (PageOcr, httpx, the gate) the other, instead of sharing one
GIL; and an engine death ends the server process the way vLLM's API server exits, so a
crash is unmistakable (the port closes, /health stops answering 200).

Pages go through the production path: `PageOcr` -> `Admission.slot` -> synthetic
renderer -> `PageClient` over httpx (pool limits as flows/ocr_pdfs.py) -> simulator.
Client and server each run a `ScaledClock(F)` of their own; the origins differ (one per
process), so only durations measured on the client's clock are compared. Every
simulated-time figure in the result is on the client's clock, starting when the pages
are handed to the admission (t = 0).

A sampler reads /metrics every `sample_interval_s` (simulated) for the
plot and the peaks; the server's gauges are exact at each read, but peaks between two
reads are missed. A run ends when every page is back, when the server dies (crash), or
when the simulated time budget runs out (timed out).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import re
import resource
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from pagegate.admission import FixedLimit, Gate, GateConfig, MetricsError, parse_vllm_metrics
from pagegate.admission.base import Admission
from pagegate.clock import Clock, ScaledClock
from pagegate.config import RunConfig
from pagegate.ocr.client import PageClient
from pagegate.ocr.page import PageOcr
from pagegate.ocr.stats import RunStats
from pagegate.sim.baselines import (
    OLMOCR_MONITOR_S,
    VLLM_LOG_INTERVAL_S,
    LogLine,
    NoLimit,
    OlmocrGroupSemaphore,
)
from pagegate.sim.measure import Metered, steady_rate
from pagegate.sim.process import SimProcess
from pagegate.sim.synthetic import SyntheticGroup, SyntheticRenderer, synthetic_groups
from pagegate.vlm.profiles import DEFAULT_PROFILE, get_profile

STRATEGIES = ("none", "olmocr-2024", "olmocr-lock", "fixed-1600", "pagegate")
IDEAL = "ideal"
OLMOCR_FIXED_LIMIT = 1600  # olmOCR --max_concurrent_requests since c6c3a1d (2026-01-08)

# Production client settings (RunConfig's defaults, read by name), in simulated seconds.
MAX_PAGE_ATTEMPTS = RunConfig.max_page_retries
REQUEST_TIMEOUT_S = RunConfig.request_timeout_seconds
UNAVAILABLE_AFTER_S = RunConfig.server_unavailable_after_seconds
HTTP_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=64)

SERVER_COLUMNS = ("t", "waiting", "running", "kv")
CLIENT_COLUMNS = ("t", "in_flight", "done", "limit", "credits")


@dataclass(frozen=True)
class RunSpec:
    """Everything one strategy run needs; JSON-serializable for the child process."""

    strategy: str
    profile: str
    pages: int
    seed: int
    time_scale: float
    group_pages: int
    sample_interval_s: float
    budget_s: float
    concurrency: int | None = None  # the ideal closed loop's in-flight count

    def __post_init__(self) -> None:
        if self.strategy not in (*STRATEGIES, IDEAL):
            raise ValueError(f"unknown strategy {self.strategy!r}")
        if self.strategy == IDEAL and not self.concurrency:
            raise ValueError("the ideal closed loop needs a concurrency")


# ------------------------------------------------------------------ strategies


@dataclass
class OpenStrategy:
    admission: Admission
    group_done: Callable[[str], None] | None = None
    gate: Gate | None = None
    olmocr: OlmocrGroupSemaphore | None = None


@asynccontextmanager
async def open_strategy(
    spec: RunSpec, groups: Sequence[SyntheticGroup], metrics_url: str, clock: Clock
) -> AsyncIterator[OpenStrategy]:
    """Build the named strategy in this loop; close it (and its pollers) afterwards."""
    name = spec.strategy
    if name == "none":
        yield OpenStrategy(NoLimit())
    elif name == IDEAL:
        assert spec.concurrency is not None
        yield OpenStrategy(FixedLimit(spec.concurrency))
    elif name == "fixed-1600":
        yield OpenStrategy(FixedLimit(OLMOCR_FIXED_LIMIT))
    elif name in ("olmocr-2024", "olmocr-lock"):
        feed = ServerLogLine(metrics_url, clock, time_scale=spec.time_scale)
        feed.start()
        semaphore = OlmocrGroupSemaphore(
            [g.group_id for g in groups], feed, clock,
            serialize_release=(name == "olmocr-lock"),
            # The feed prints a line every 10 s; olmOCR read each line as it arrived.
            log_interval_seconds=OLMOCR_MONITOR_S,
        )
        await semaphore.start()
        try:
            yield OpenStrategy(semaphore, semaphore.group_done, olmocr=semaphore)
        finally:
            await semaphore.aclose()
            feed.stop()
    elif name == "pagegate":
        # The production gate, DEFAULT config, scraping /metrics with the production poller.
        async with Gate.for_metrics_url(GateConfig(), metrics_url, clock) as gate:
            yield OpenStrategy(gate, gate=gate)
    else:
        raise ValueError(f"unknown strategy {name!r}")


class ServerLogLine:
    """vLLM's periodic stats line ("Running: N reqs, Waiting: M reqs"), on the server's clock.

    vLLM prints it every 10 s whatever its clients are doing, and olmOCR parsed each line
    as it arrived (`process_line` in allenai/olmocr `olmocr/pipeline.py`). Here a thread
    of its own scrapes /metrics every 10 simulated seconds and keeps the newest line. In
    its own thread the line stays as fresh as on a real server even while the client's
    event loop is busy firing a 500-page group: the harness scales time but not the
    client's CPU, so such a burst stalls the loop for ~2 wall seconds, i.e. ~80 simulated
    seconds at 40x, and an in-loop scraper would feed olmOCR's monitor lines far older
    than vLLM's.
    Before the first line, olmOCR's variables were 0; so is `latest`.
    """

    def __init__(
        self, url: str, clock: Clock, *, time_scale: float, interval_s: float = VLLM_LOG_INTERVAL_S
    ) -> None:
        self.url = url
        self.clock = clock
        self.wall_interval = interval_s / time_scale
        self.latest = LogLine(running=0, waiting=0)
        self.lines = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vllm-log-line", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    async def __call__(self) -> LogLine:
        return self.latest

    def _run(self) -> None:
        with httpx.Client(timeout=5.0) as client:
            while not self._stop.is_set():
                try:
                    reading = parse_vllm_metrics(client.get(self.url).text, at=self.clock.now())
                except (httpx.HTTPError, MetricsError):
                    pass  # a dead or busy server prints no line
                else:
                    self.latest = LogLine(running=reading.running, waiting=reading.waiting)
                    self.lines += 1
                self._stop.wait(self.wall_interval)


# ------------------------------------------------------------------ sampling


def parse_sample(text: str) -> dict[str, float]:
    """The gauges and counters the benchmark reports, from a /metrics page."""
    wanted = {
        "vllm:num_requests_waiting": "waiting",
        "vllm:num_requests_running": "running",
        "vllm:kv_cache_usage_perc": "kv",
        "vllm:num_preemptions_total": "preemptions",
        "pagegate_sim:recomputed_tokens_total": "recomputed_tokens",
        "pagegate_sim:host_memory_mb": "host_memory_mb",
        "pagegate_sim:peak_waiting": "peak_waiting",
        "pagegate_sim:peak_kv_cache_usage_perc": "peak_kv",
    }
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = wanted.get(sample.name)
            if key in ("kv", "peak_kv"):  # the fullest data-parallel engine, not the sum
                out[key] = max(out.get(key, 0.0), float(sample.value))
            elif key is not None:
                out[key] = out.get(key, 0.0) + float(sample.value)
    return out


class _GateEvents(logging.Handler):
    """Keeps the gate's release and pause log lines with their simulated time."""

    def __init__(self, clock: Clock, t0: float) -> None:
        super().__init__(logging.INFO)
        self.clock = clock
        self.t0 = t0
        self.events: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.events.append((round(self.clock.now() - self.t0, 2), record.getMessage()))


def _vm_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[k]


async def _loop_lag(lags: list[float]) -> None:
    """Wall-clock lateness of a 10 ms sleep: how busy the client's event loop is."""
    while True:
        start = time.perf_counter()
        await asyncio.sleep(0.01)
        lags.append((time.perf_counter() - start - 0.01) * 1000)


# ------------------------------------------------------------------ one run


async def run_client(spec: RunSpec, sim: SimProcess) -> dict[str, Any]:
    """Drive every page of the workload through `spec.strategy`; return the raw result."""
    clock = ScaledClock(spec.time_scale)
    groups = synthetic_groups(spec.pages, spec.group_pages)
    renderer = SyntheticRenderer()
    base_rss = _vm_rss_mb()
    done_times: list[float] = []
    failed_pages = 0
    errors: list[str] = []
    server_rows: list[list[float | None]] = []
    client_rows: list[list[float | None]] = []
    last_metrics: dict[str, float] = {}
    lags: list[float] = []
    end_reason = "finished"
    crash_at: float | None = None

    limits = HTTP_LIMITS
    async with (
        httpx.AsyncClient(limits=limits) as http,
        httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as probe,
        open_strategy(spec, groups, sim.metrics_url, clock) as strategy,
    ):
        metered = Metered(strategy.admission, clock)
        stats = RunStats(started_at=clock.now())
        pages = PageOcr(
            client=PageClient(http, sim.base_url, timeout_seconds=REQUEST_TIMEOUT_S / spec.time_scale),
            admission=metered,
            renderer=renderer,
            profile=get_profile(DEFAULT_PROFILE),
            model=RunConfig.model,
            clock=clock,
            stats=stats,
            max_attempts=MAX_PAGE_ATTEMPTS,
            unavailable_after_seconds=UNAVAILABLE_AFTER_S,
        )
        t0 = clock.now()
        gate_events = _GateEvents(clock, t0)
        gate_logger = logging.getLogger("pagegate.gate")
        gate_logger.addHandler(gate_events)
        gate_logger.setLevel(logging.INFO)
        gate_logger.propagate = False  # kept in the result's events, not printed

        async def one_page(group: SyntheticGroup, index: int) -> None:
            nonlocal failed_pages
            result = await pages.run(group.document, index, group.group_id)
            if result.is_fallback:
                failed_pages += 1
            else:
                done_times.append(clock.now() - t0)

        async def one_group(group: SyntheticGroup) -> None:
            outcomes = await asyncio.gather(
                *(one_page(group, i) for i in range(group.document.page_count)),
                return_exceptions=True,
            )
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    errors.append(repr(outcome)[:200])
            if strategy.group_done is not None:
                strategy.group_done(group.group_id)

        dead = asyncio.Event()

        def died(at: float) -> None:
            nonlocal crash_at
            if crash_at is None:
                crash_at = at
            dead.set()

        metered.on_server_error = lambda: died(clock.now() - t0)

        async def probe_server() -> None:
            """Read /metrics every interval; a closed port is death (so are 500s, see Metered)."""
            nonlocal last_metrics
            while True:
                try:
                    last_metrics = parse_sample((await probe.get(sim.metrics_url)).text)
                except httpx.ConnectError:
                    died(clock.now() - t0)  # the crashed server closed its port
                    return
                except httpx.HTTPError:
                    pass  # a slow scrape is a missed sample, not a crash
                else:
                    m = last_metrics
                    server_rows.append([round(clock.now() - t0, 2), m.get("waiting"),
                                        m.get("running"), round(m.get("kv", 0.0), 4)])
                await clock.sleep(spec.sample_interval_s)

        async def watch() -> str:
            """Sample the client (no I/O) until the server dies or the budget runs out."""
            while True:
                t = clock.now() - t0
                if sim.process is not None and sim.process.poll() is not None:
                    died(t)
                if dead.is_set():
                    return "crashed"
                limit: float | None = None
                credits: float | None = None
                if strategy.gate is not None:
                    state = strategy.gate.state
                    limit, credits = state.concurrency.limit, state.units.open_credits
                elif strategy.olmocr is not None:
                    limit = strategy.olmocr.snapshot()["groups_started"]
                client_rows.append([round(t, 2), metered.in_flight, len(done_times), limit, credits])
                if t > spec.budget_s:
                    return "timed_out"
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(spec.sample_interval_s / spec.time_scale):
                        await dead.wait()

        lag_task = asyncio.create_task(_loop_lag(lags))
        prober = asyncio.create_task(probe_server())
        work = asyncio.create_task(_gather_groups([one_group(g) for g in groups]))
        watcher = asyncio.create_task(watch())
        await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if watcher.done():
            end_reason = watcher.result()
            work.cancel()
        else:
            watcher.cancel()
        if dead.is_set():  # pages may all have come back (as failures) from a dead server
            end_reason = "crashed"
        for task in (work, watcher):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for helper in (lag_task, prober):
            helper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await helper
        end_t = clock.now() - t0
        snapshot = strategy.admission.snapshot()
        olmocr_events = (
            [asdict(e) | {"at": round(e.at - t0, 2)} for e in strategy.olmocr.events]
            if strategy.olmocr is not None else []
        )
        gate_logger.removeHandler(gate_events)

    crashed = end_reason == "crashed"
    if crashed:
        assert crash_at is not None
        done_before = [d for d in done_times if d <= crash_at]
        elapsed = crash_at
    else:
        done_before = done_times
        elapsed = max(done_times) if end_reason == "finished" and done_times else end_t
    pages_done = len(done_before)
    events = olmocr_events or [{"at": at, "detail": msg} for at, msg in gate_events.events]
    if crashed:  # what the client did after the death is noise (fast failures, retries)
        server_rows = [r for r in server_rows if (r[0] or 0.0) <= elapsed]
        client_rows = [r for r in client_rows if (r[0] or 0.0) <= elapsed]
    return {
        "strategy": spec.strategy,
        "profile": spec.profile,
        "pages": spec.pages,
        "pages_done": pages_done,
        "pages_failed": failed_pages,
        "page_errors": errors[:5],
        "crashed": int(crashed),
        "crash_reason": None,  # filled in by run_spec once the server process has exited
        "crash_at_s": None if crash_at is None else round(crash_at, 2),
        "timed_out": end_reason == "timed_out",
        "elapsed_s": round(elapsed, 2),
        "pages_per_s": pages_done / elapsed if elapsed > 0 else 0.0,
        "steady_pages_per_s": steady_rate(done_before) or None,
        # The simulator's own high-water marks (no scrape misses them), else the samples.
        "peak_waiting": max(last_metrics.get("peak_waiting", 0.0),
                            max((r[1] or 0 for r in server_rows), default=0)),
        "max_kv_usage": round(max(last_metrics.get("peak_kv", 0.0),
                                  max((r[3] or 0.0 for r in server_rows), default=0.0)), 4)
        if last_metrics else None,  # the server died before any scrape answered
        "preemptions": int(last_metrics.get("preemptions", 0)),
        "recomputed_tokens": int(last_metrics.get("recomputed_tokens", 0)),
        "latency_p50_s": _percentile(metered.latencies, 0.5),
        "latency_p95_s": _percentile(metered.latencies, 0.95),
        "peak_in_flight": metered.peak_in_flight,
        "page_attempts": stats.page_attempts,
        "capacity_retries": stats.capacity_retries,
        "outcomes": dict(metered.outcomes),
        "client_base_rss_mb": round(base_rss, 1),
        "loop_lag_ms": {
            "p50": _percentile(lags, 0.5),
            "p99": _percentile(lags, 0.99),
            "max": max(lags) if lags else None,
        },
        "strategy_state": _jsonable(snapshot),
        "events": [e for e in events if not crashed or e["at"] <= elapsed],
        "trace": {
            "server": {"columns": list(SERVER_COLUMNS), "rows": server_rows},
            "client": {"columns": list(CLIENT_COLUMNS), "rows": client_rows},
        },
    }


async def _gather_groups(coros: Sequence[Any]) -> None:
    await asyncio.gather(*coros)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def run_spec(spec: RunSpec) -> dict[str, Any]:
    """Start a simulator, run the client against it, stop the simulator (this process)."""
    started = time.perf_counter()
    sim = SimProcess(
        profile=spec.profile,
        extra_args=("--time-scale", f"{spec.time_scale:g}", "--seed", str(spec.seed)),
    )
    sim.start()
    try:
        result = asyncio.run(run_client(spec, sim))
        if result["crashed"]:
            result.update(_crash_details(sim))
            result["peak_waiting"] = max(result["peak_waiting"], result.pop("waiting_at_death", 0))
    finally:
        sim.stop()
    result["client_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    result["wall_s"] = round(time.perf_counter() - started, 2)
    result["time_scale"] = spec.time_scale
    result["group_pages"] = spec.group_pages
    result["concurrency"] = spec.concurrency
    return result


_DEATH = re.compile(r"engine died \((?P<reason>.*)\); exiting")
_WAITING_AT_DEATH = re.compile(r"waiting queue reached (?P<n>\d+)")


def _crash_details(sim: SimProcess) -> dict[str, Any]:
    """The simulator's own death message (printed once uvicorn has shut down).

    A crash between two samples hides the queue's peak from the sampler; the message
    names the queue length that killed the server, so it is folded into peak_waiting.
    """
    if sim.process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            sim.process.wait(timeout=15)
    match = _DEATH.search(sim.log_tail())
    if match is None:
        return {"crash_reason": "server stopped answering (no death message)"}
    reason = match.group("reason")
    waiting = _WAITING_AT_DEATH.search(reason)
    return {"crash_reason": reason, "waiting_at_death": int(waiting.group("n")) if waiting else 0}


def run_in_subprocess(spec: RunSpec, out: Path) -> dict[str, Any]:
    """Run one strategy in a fresh Python process (clean peak RSS, its own event loop)."""
    cmd = [sys.executable, "-m", "bench.harness", json.dumps(asdict(spec)), str(out)]
    subprocess.run(cmd, check=True, cwd=Path(__file__).resolve().parents[1])
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        raise SystemExit("usage: python -m bench.harness SPEC_JSON OUT_JSON")
    spec = RunSpec(**json.loads(args[0]))
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    result = run_spec(spec)
    Path(args[1]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
