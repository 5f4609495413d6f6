"""The gate against the simulated vLLM server over real loopback HTTP (wall clock).

A burst of pages through the production Gate (MetricsPoller scraping the simulator's
/metrics) keeps the server's queue small, where the same burst without a gate floods it.
The gate's throughput and safety targets are judged in virtual time instead
(tests/test_gate_targets.py).
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from PIL import Image

from pagegate.admission import FixedLimit, Gate, GateConfig, Outcome, parse_vllm_metrics
from pagegate.admission.base import Admission
from pagegate.vlm.chat import build_chat_request
from pagegate.vlm.profiles import DEFAULT_PROFILE, get_profile

pytestmark = pytest.mark.slow

# ------------------------------------------------------------------------- over HTTP

BURST_PAGES = 160
SLOTS = 4
WAITING_BOUND = 2 * SLOTS
"""With the gate, the simulator's waiting queue stays at or below this."""

# The simulator's "ci" profile serves a page in ~0.25 s per running slot at time scale 1,
# so with 4 slots the burst takes ~10 s to drain. Olmocr's 30 s cooldown and 1 s polling
# are sized for pages that take 30-60 s; here every time constant is scaled down the same
# way (cooldown 2 s, poll 0.1 s) so the gate goes through several releases within the
# burst and the test stays well under a minute. The scrape timeout and staleness are
# bench/vllm_cpu.py's TINY_GATE values (2 s, 3 s), not scaled down: the 160 requests share
# this test's event loop with the poller, so on a loaded machine a scrape can take well
# over half a second, and a reading gone stale would pause the gate.
HTTP_GATE_CONFIG = GateConfig(
    cooldown_seconds=2.0,
    poll_interval_seconds=0.1,
    stale_after_seconds=3.0,
    scrape_timeout_seconds=2.0,
    drain_window_seconds=4.0,
    first_unit_pages=32,
)


def _page_png(i: int) -> bytes:
    """A letter-size page (olmOCR's 1288 px) whose shade makes its content, so its length, vary."""
    buf = io.BytesIO()
    Image.new("L", (996, 1288), color=i % 256).save(buf, "PNG", optimize=True)
    return buf.getvalue()


@dataclass
class BurstResult:
    max_waiting: int
    max_running: int
    elapsed_s: float
    statuses: dict[int, int]
    snapshot: dict[str, Any]


async def _sample_queue(metrics_url: str, stop: asyncio.Event, peaks: dict[str, int]) -> None:
    async with httpx.AsyncClient(timeout=5.0) as client:
        while not stop.is_set():
            reading = parse_vllm_metrics((await client.get(metrics_url)).text, at=0.0)
            peaks["waiting"] = max(peaks["waiting"], reading.waiting)
            peaks["running"] = max(peaks["running"], reading.running)
            await asyncio.sleep(0.05)  # sampling period of the observer, not a wait for a result


async def _burst(
    base_url: str, metrics_url: str, open_admission: Callable[[], AbstractAsyncContextManager[Admission]]
) -> BurstResult:
    """Send every page at once through `admission`, the way a group task does."""
    profile = get_profile(DEFAULT_PROFILE)
    bodies = [
        build_chat_request(profile, model="olmocr", image_png=_page_png(i), temperature=0.1)
        for i in range(BURST_PAGES)
    ]
    peaks = {"waiting": 0, "running": 0}
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample_queue(metrics_url, stop, peaks))
    unlimited = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=120.0, limits=unlimited) as http, open_admission() as admission:

        async def page(i: int) -> int:
            async with admission.slot(f"group-{i // 40}") as permit:
                permit.sent()
                response = await http.post(f"{base_url}/chat/completions", json=bodies[i])
                permit.finish(Outcome.OK if response.status_code == 200 else Outcome.CAPACITY)
                return response.status_code

        codes = await asyncio.gather(*(page(i) for i in range(BURST_PAGES)))
        snapshot = admission.snapshot()
    elapsed = time.monotonic() - started
    stop.set()
    await sampler
    statuses = {code: codes.count(code) for code in set(codes)}
    return BurstResult(peaks["waiting"], peaks["running"], elapsed, statuses, snapshot)


@asynccontextmanager
async def _no_gate() -> Any:
    yield FixedLimit(1600)  # olmOCR's global cap: far above this burst


def test_gate_keeps_the_servers_queue_small_where_no_gate_floods_it(start_sim: Any) -> None:
    # Crash thresholds off: the point is to measure the queue without a gate, not to die.
    sim = start_sim(profile="ci", max_num_seqs=SLOTS, time_scale=1.0, crash_waiting=0, host_mem_limit_mb=0)

    def gated() -> AbstractAsyncContextManager[Admission]:
        return Gate.for_metrics_url(HTTP_GATE_CONFIG, sim.metrics_url)

    with_gate = asyncio.run(_burst(sim.base_url, sim.metrics_url, gated))
    without = asyncio.run(_burst(sim.base_url, sim.metrics_url, _no_gate))

    print(
        f"\n[gate-sim] {BURST_PAGES} pages, {SLOTS} slots: peak waiting with gate "
        f"{with_gate.max_waiting} (bound {WAITING_BOUND}), without {without.max_waiting}; "
        f"elapsed {with_gate.elapsed_s:.1f} s vs {without.elapsed_s:.1f} s; "
        f"releases {with_gate.snapshot['releases']}, C {with_gate.snapshot['concurrency_limit']}, "
        f"pauses {with_gate.snapshot['pauses']}"
    )
    assert with_gate.statuses == {200: BURST_PAGES}
    assert without.statuses == {200: BURST_PAGES}
    assert with_gate.max_running == SLOTS  # the gate kept the slots busy
    assert with_gate.max_waiting <= WAITING_BOUND
    assert without.max_waiting > 10 * WAITING_BOUND
    assert with_gate.snapshot["releases"] >= 2
    assert with_gate.snapshot["pauses"] == 0
