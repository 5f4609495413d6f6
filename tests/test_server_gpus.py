"""`launch_server` with `gpus`: one launched server per GPU, pages routed over them.

The simulator stands in for vLLM; a wrapper records each start's CUDA_VISIBLE_DEVICES
and port, so the test sees what a real `vllm serve` would have been given.
"""

from __future__ import annotations

import contextlib
import shlex
import socket
import sys
from pathlib import Path

import httpx
import pytest

from tests.helpers import audit, run_flow, write_corpus

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]


def two_free_ports() -> int:
    """A port p with p and p + 1 both free now (the launcher takes consecutive ports)."""
    for _ in range(50):
        with contextlib.ExitStack() as stack:
            first = stack.enter_context(socket.socket())
            first.bind(("127.0.0.1", 0))
            port = int(first.getsockname()[1])
            second = stack.enter_context(socket.socket())
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise RuntimeError("no two consecutive free ports")


def test_one_server_per_gpu_and_pages_on_both(tmp_path: Path) -> None:
    pdfs = write_corpus(tmp_path / "in", 6, 3)
    ws = tmp_path / "ws"
    port = two_free_ports()
    starts = tmp_path / "starts.txt"
    sim = f"{shlex.quote(sys.executable)} -m pagegate.sim --profile ci --time-scale 0.5"
    record = f'echo "$CUDA_VISIBLE_DEVICES $*" >> {shlex.quote(str(starts))}'
    command = f"sh -c '{record}; exec {sim} \"$@\"' sh"
    state, summary = run_flow(
        sources=[str(tmp_path / "in")], workspace=str(ws), pages_per_group=3, workers=4,
        max_page_retries=1,
        launch_server={
            "model": "allenai/olmOCR-2-7B-1025-FP8", "command": command, "port": port,
            "gpus": "0,1", "limit_mm_per_prompt": None, "ready_timeout_seconds": 30,
            "stop_timeout_seconds": 2,
        },
    )
    result = audit(ws)
    launched = sorted(line.split()[0] + " " + line.split()[line.split().index("--port") + 1]
                      for line in starts.read_text().splitlines())
    assert launched == [f"0 {port}", f"1 {port + 1}"], "one server per GPU, consecutive ports"
    assert state.is_completed(), state.message
    assert result.sources == set(pdfs) and result.duplicates == 0 and result.ledger == 0
    assert result.fallback_pages == 0 and summary["pages"] == sum(pdfs.values())
    for p in (port, port + 1):
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{p}/health", timeout=2)  # both stopped with the run
    print(f"--gpus 0,1: servers {launched}; PDFs {result.results}, pages {summary['pages']}")
