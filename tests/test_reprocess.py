"""`reprocess`: redo what a workspace's ledger names (or a list), nothing else.

The first run fails on purpose (no server, unusable replies, a corrupt file); the
`pagegate reprocess` CLI and the `reprocess` flow then work through the ledger with a
healthy simulator, whose request counter shows exactly which pages were redone.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pagegate import samples
from tests.helpers import metric_total, read_ledger, read_results, run_flow

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    return subprocess.run([sys.executable, "-m", "pagegate.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def test_cli_reprocess_takes_only_the_chosen_reasons_from_the_ledger(
    tmp_path: Path, start_sim: Any
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    pages = {"a": 2, "b": 1, "d": 3}
    for name, n in pages.items():
        (src / f"{name}.pdf").write_bytes(samples.text_pdf(n, title=name))
    (src / "c.pdf").write_bytes(samples.truncated_pdf())
    ws = tmp_path / "ws"
    # It lists the model, so the run starts, then answers every page 503.
    busy = start_sim(profile="ci", reject_status_every=1)
    state, _ = run_flow(sources=[str(src)], workspace=str(ws), server_url=busy.base_url,
                        gate_enabled=False, server_unavailable_after_seconds=0.5)
    assert state.is_failed()
    before = {Path(u).stem: r["reason"] for u, r in read_ledger(ws).items()}
    assert before == {"a": "server_unavailable", "b": "server_unavailable",
                      "c": "unreadable", "d": "server_unavailable"}
    sim = start_sim(profile="ci")

    first = cli("reprocess", str(ws), "--only-reason", "server_unavailable",
                "--server", sim.base_url, "--json")
    requests_first = metric_total(sim.metrics_url, "vllm:request_success_total")
    second = cli("reprocess", str(ws), "--server", sim.base_url, "--json")
    requests_second = metric_total(sim.metrics_url, "vllm:request_success_total") - requests_first

    assert first.returncode == 0, first.stdout + first.stderr
    assert json.loads(first.stdout)["pdfs_ok"] == 3
    assert requests_first == sum(pages.values())  # a, b and d; c was not selected
    assert {Path(u).stem for u in read_results(ws)} == {"a", "b", "d"}
    assert {Path(u).stem: r["reason"] for u, r in read_ledger(ws).items()} == {"c": "unreadable"}
    # Everything left: only c, which is still corrupt; no page request, still in the ledger.
    assert second.returncode == 1, second.stdout + second.stderr
    assert [f["source"] for f in json.loads(second.stdout)["failed"]] == [str(src / "c.pdf")]
    assert requests_second == 0
    assert list(read_ledger(ws)) == [str(src / "c.pdf")]
    print(f"reprocess: PDFs in 4, ledger before 4, results out 3, duplicates 0, ledger after 1; "
          f"page requests {requests_first:.0f} then {requests_second:.0f}")


def test_reprocess_redoes_flagged_documents_and_explicit_lists(
    tmp_path: Path, start_sim: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pagegate.flows.reprocess import reprocess

    src = tmp_path / "in"
    src.mkdir()
    (src / "flagged.pdf").write_bytes(samples.text_pdf(2, title="Flagged"))
    (src / "clean.pdf").write_bytes(samples.text_pdf(1, title="Clean"))
    ws = tmp_path / "ws"
    bad = start_sim(profile="ci", garbage_below_temperature=99)
    run_flow(sources=[str(src / "flagged.pdf")], workspace=str(ws), server_url=bad.base_url,
             max_page_retries=1)
    good = start_sim(profile="ci")
    run_flow(sources=[str(src / "clean.pdf")], workspace=str(ws), server_url=good.base_url)
    assert {Path(u).stem: r["reason"] for u, r in read_ledger(ws).items()} == {
        "flagged": "page_error_rate"
    }
    requests_before = metric_total(good.metrics_url, "vllm:request_success_total")

    # No server_url: like a deployment run on a GPU worker, the node's own server from
    # PAGEGATE_SERVER_URL (a short deadline so a wrong server fails fast instead of waiting).
    monkeypatch.setenv("PAGEGATE_SERVER_URL", good.base_url)
    run: Any = reprocess(workspace=str(ws), server_unavailable_after_seconds=10, return_state=True)
    state = asyncio.run(run)
    flagged_requests = metric_total(good.metrics_url, "vllm:request_success_total") - requests_before
    # An explicit list: the clean, committed PDF is skipped; a vanished one is a download failure.
    gone = str(src / "gone.pdf")
    run = reprocess(workspace=str(ws), server_url=good.base_url,
                    pdfs=[str(src / "clean.pdf"), gone], return_state=True)
    listed = asyncio.run(run)
    listed_summary = listed.result(raise_on_failure=False)

    assert state.is_completed(), state.message
    assert flagged_requests == 2  # only the flagged document's two pages
    doc = read_results(ws)[str(src / "flagged.pdf")]
    assert doc["attributes"]["is_fallback_page"] == [False, False]
    assert listed.is_failed()
    assert listed_summary["pdfs_skipped"] == 1
    record = read_ledger(ws)[gone]
    assert record["reason"] == "download_failed" and record["extra"]["s3_code"] == "ENOENT"
    assert str(src / "flagged.pdf") not in read_ledger(ws)


def test_reprocess_writes_the_outputs_the_run_recorded(tmp_path: Path, start_sim: Any) -> None:
    """The run's --markdown (and its root) come from the workspace, not reprocess's flags."""
    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    (src / "a.pdf").write_bytes(samples.text_pdf(1, title="a"))
    (src / "sub" / "b.pdf").write_bytes(samples.text_pdf(2, title="b"))
    ws = tmp_path / "ws"
    busy = start_sim(profile="ci", reject_status_every=1)
    state, _ = run_flow(sources=[str(src)], workspace=str(ws), server_url=busy.base_url,
                        markdown=True, gate_enabled=False, server_unavailable_after_seconds=0.5)
    assert state.is_failed() and len(read_ledger(ws)) == 2
    sim = start_sim(profile="ci")

    redone = cli("reprocess", str(ws), "--server", sim.base_url, "--json")

    assert redone.returncode == 0, redone.stdout + redone.stderr
    assert len(read_results(ws)) == 2
    assert sorted(p.relative_to(ws / "markdown").as_posix() for p in ws.rglob("*.md")) == [
        "a.md", "sub/b.md"
    ]
