"""Fault tests over real processes: kill -9 of the flow, a simulator crash, overlapping runs.

Every scenario ends with the same audit of the workspace (`audit`): one result object
per PDF, each exactly one Dolma line naming its source, no duplicate ids, and the
ledger. Page requests are read from the simulator's own counter.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pagegate import samples
from pagegate.sim.process import SimProcess
from tests.helpers import REPO, audit, cli_env, metric_total, run_flow, write_corpus

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]


def cli_run(src: Path, ws: Path, server: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "pagegate.cli", "run", str(src), "--workspace", str(ws),
         "--server", server, *extra],
        cwd=REPO, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


LEASE_S = 10.0
"""The claim lease of both runs: the killed run's claims lapse after it, and the rerun
takes its groups then (10 s here rather than the default 60)."""


def test_kill_9_mid_run_then_rerun_gives_every_pdf_exactly_once(tmp_path: Path) -> None:
    pdfs = write_corpus(tmp_path / "in", 16, 3)
    ws = tmp_path / "ws"
    # A slow server (a quarter of real time, one slot) so the kill lands mid-run: after the
    # third commit, 39 pages are left at one page at a time, tens of seconds of decoding
    # that no stall of this test's 50 ms poll can outlast. One PDF per group.
    with SimProcess(profile="ci", extra_args=("--time-scale", "0.25", "--max-num-seqs", "1")) as slow:
        proc = cli_run(tmp_path / "in", ws, slow.base_url, "--pages-per-group", "3", "--workers", "2",
                       "--claim-lease-seconds", str(LEASE_S))
        try:
            deadline = time.monotonic() + 120
            while len(list((ws / "results").glob("*.jsonl"))) < 3:
                assert proc.poll() is None, "the run ended before it could be killed"
                assert time.monotonic() < deadline, "no results within 120 s"
                time.sleep(0.05)  # polling the workspace for the first commits
            proc.kill()  # SIGKILL: no cleanup, no final state, half-done groups
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    after_kill = audit(ws)
    assert 3 <= after_kill.results < len(pdfs), "killed mid-run"
    assert after_kill.duplicates == 0
    left = {uri: n for uri, n in pdfs.items() if uri not in after_kill.sources}

    with SimProcess(profile="ci") as fast:
        state, summary = run_flow(sources=[str(tmp_path / "in")], workspace=str(ws),
                                  server_url=fast.base_url, pages_per_group=3,
                                  claim_lease_seconds=LEASE_S)
        requests = metric_total(fast.metrics_url, "vllm:request_success_total")

    final = audit(ws)
    assert state.is_completed(), state.message
    assert final.sources == set(pdfs) and final.results == len(pdfs)
    assert final.duplicates == 0 and final.ledger == 0 and final.fallback_pages == 0
    assert summary["pdfs_skipped"] == after_kill.results and summary["pdfs_ok"] == len(left)
    assert requests == sum(left.values()), "the rerun redid only the uncommitted PDFs"
    temp_files = [p for p in (ws / "results").iterdir() if not p.name.endswith(".jsonl")]
    print(f"kill -9: PDFs in {len(pdfs)}, committed at kill {after_kill.results}, results out "
          f"{final.results}, duplicates {final.duplicates}, ledger {final.ledger}, rerun page "
          f"requests {requests:.0f} (= pages of the {len(left)} uncommitted PDFs), leftover temp "
          f"files {len(temp_files)}")


def test_simulator_crash_and_restart_on_the_same_port_loses_no_page(tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "a-small.pdf").write_bytes(samples.text_pdf(2, title="Small"))
    (src / "b-big.pdf").write_bytes(samples.text_pdf(20, title="Big"))
    ws = tmp_path / "ws"
    # Ungated, 20 pages hit a one-slot server that dies with more than 4 waiting: the
    # first group (2 pages: one running, one waiting) is served, the second crashes it once
    # 6 of its pages are on it. At a twentieth of real speed a page takes seconds on the
    # one slot, so rendering would have to be slower than decoding for it not to crash.
    first = SimProcess(profile="ci", extra_args=("--time-scale", "0.05", "--crash-waiting", "4",
                                                 "--max-num-seqs", "1"))
    first.start()
    restarted: list[SimProcess] = []
    exit_codes: list[int] = []

    def restart_when_dead() -> None:
        assert first.process is not None
        exit_codes.append(first.process.wait())
        second = SimProcess(profile="ci", port=first.port, extra_args=("--crash-waiting", "0"))
        restarted.append(second.start())

    watcher = threading.Thread(target=restart_when_dead, daemon=True)
    watcher.start()
    try:
        state, summary = run_flow(
            sources=[str(src)], workspace=str(ws), server_url=first.base_url,
            pages_per_group=4, workers=1, gate_enabled=False, max_concurrent_requests=64,
        )
        watcher.join(timeout=60)
        assert restarted, "the simulator never crashed"
        requests_after = metric_total(restarted[0].metrics_url, "vllm:request_success_total")
    finally:
        first.stop()
        for sim in restarted:
            sim.stop()

    result = audit(ws)
    assert exit_codes == [3], "the simulator died through its crash model"
    assert state.is_completed(), state.message
    assert result.results == 2 and result.duplicates == 0 and result.ledger == 0
    assert result.fallback_pages == 0, "every page was read by the model, none fell back"
    assert summary["pages"] == 22
    # At least the 1 running + 5 waiting pages of the crash were resubmitted to the new server.
    assert 6 <= requests_after <= 20
    print(f"sim crash: PDFs in 2 (22 pages), results out {result.results}, duplicates "
          f"{result.duplicates}, ledger {result.ledger}, pages resubmitted to the restarted "
          f"server {requests_after:.0f}, fallback pages {result.fallback_pages}")


def test_overlapping_runs_on_one_workspace_commit_each_pdf_once(tmp_path: Path) -> None:
    pdfs = write_corpus(tmp_path / "in", 8, 2)
    ws = tmp_path / "ws"
    with SimProcess(profile="ci") as sim:
        runs = [cli_run(tmp_path / "in", ws, sim.base_url, "--pages-per-group", "2")
                for _ in range(2)]
        codes = [p.wait(timeout=180) for p in runs]
        requests = metric_total(sim.metrics_url, "vllm:request_success_total")

    result = audit(ws)
    assert codes == [0, 0]
    assert result.sources == set(pdfs) and result.results == len(pdfs)
    assert result.duplicates == 0 and result.ledger == 0
    assert sum(pdfs.values()) <= requests <= 2 * sum(pdfs.values())
    print(f"overlap: PDFs in {len(pdfs)}, results out {result.results}, duplicates "
          f"{result.duplicates}, ledger {result.ledger}, page requests {requests:.0f} "
          f"(pages {sum(pdfs.values())})")


