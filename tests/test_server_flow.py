"""A run that launches its own server (the simulator as 'vllm'), which is killed -9 mid-run.

The supervisor restarts it on the same port; pages in flight back off and are resubmitted
without spending page attempts. Every PDF must come out exactly once, none in the ledger,
no page falling back to the PDF's text layer.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from pagegate.sim.process import free_port
from tests.helpers import audit, engine_busy, healthy, run_flow, write_corpus

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]


def pids(pidfile: Path) -> list[int]:
    return [int(x) for x in pidfile.read_text().split()] if pidfile.exists() else []


def test_server_killed_mid_run_is_restarted_and_no_page_is_lost(tmp_path: Path) -> None:
    pdfs = write_corpus(tmp_path / "in", 8, 3)
    ws = tmp_path / "ws"
    port = free_port()
    pidfile = tmp_path / "server.pids"
    # Each start records its pid, then becomes the simulator (a quarter of real speed, so
    # the kill lands while pages are in flight); the launcher's flags follow as "$@".
    sim = f"{shlex.quote(sys.executable)} -m pagegate.sim --profile ci --time-scale 0.25"
    command = f"sh -c 'echo $$ >> {shlex.quote(str(pidfile))}; exec {sim} \"$@\"' sh"
    killed: list[float] = []
    back: list[float] = []
    in_flight: list[float] = []

    def kill_mid_run() -> None:
        deadline = time.monotonic() + 90
        while len(list((ws / "results").glob("*.jsonl"))) < 2:
            if time.monotonic() > deadline or run_over.is_set():
                return
            time.sleep(0.05)  # polling the workspace for the first commits
        [first] = pids(pidfile)
        metrics = f"http://127.0.0.1:{port}/metrics"
        while not in_flight:
            if time.monotonic() > deadline or run_over.is_set():
                return
            busy = engine_busy(metrics)
            if busy > 0:
                in_flight.append(busy)
            else:
                time.sleep(0.02)  # polling the server until pages are on it
        os.kill(first, signal.SIGKILL)
        killed.append(time.monotonic())
        # The restart gets a deadline of its own: ready_timeout_seconds (30) and room.
        restart_deadline = killed[0] + 60
        while time.monotonic() < restart_deadline:
            if len(pids(pidfile)) == 2 and healthy(port, timeout=1):
                back.append(time.monotonic())
                return
            time.sleep(0.02)  # polling for the restarted server

    run_over = threading.Event()
    killer = threading.Thread(target=kill_mid_run, daemon=True)
    killer.start()
    state, summary = run_flow(
        sources=[str(tmp_path / "in")], workspace=str(ws), pages_per_group=3, workers=4,
        max_page_retries=1,  # a page that lost an attempt to the outage would fall back
        launch_server={
            "model": "allenai/olmOCR-2-7B-1025-FP8", "command": command, "port": port,
            "served_model_name": "olmocr", "limit_mm_per_prompt": None,
            "watchdog_interval_seconds": 0.25, "ready_timeout_seconds": 30,
            "stop_timeout_seconds": 2,
        },
    )
    run_over.set()
    killer.join(timeout=30)

    result = audit(ws)
    assert killed and in_flight and in_flight[0] > 0, "the server was killed with pages on it"
    assert back, "the launcher brought a new server up on the same port"
    assert len(pids(pidfile)) == 2, "started once, restarted once"
    assert state.is_completed(), state.message
    assert result.sources == set(pdfs) and result.results == len(pdfs)
    assert result.duplicates == 0 and result.ledger == 0
    assert result.fallback_pages == 0 and summary["pages"] == sum(pdfs.values())
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)  # stopped with the run
    print(f"kill -9 of the launched server: PDFs {len(pdfs)}, results {result.results}, "
          f"duplicates {result.duplicates}, ledger {result.ledger}, fallback pages "
          f"{result.fallback_pages}, pages on the server at the kill {in_flight[0]:.0f}; serving again {back[0] - killed[0]:.2f} s after the kill")
