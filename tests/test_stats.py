"""`pagegate stats`: pure accounting, and the CLI on workspaces written by real runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pagegate import samples
from pagegate.io.local import LocalStore
from pagegate.output.documents import dolma_line
from pagegate.output.ledger import FailureRecord, ledger_key, record_to_json, result_key
from pagegate.plan.groups import Group
from pagegate.report.records import (
    PLAN_NAME,
    RunPlan,
    plan_from_json,
    plan_to_json,
    run_id_of,
    run_key,
)
from pagegate.report.stats import (
    ResultMeta,
    collect_stats,
    format_stats,
    remaining_from_plans,
    remaining_from_sources,
    result_meta,
    summarize,
)
from tests.helpers import run_flow

AT = "2026-11-30T10:00:00.000Z"


def plan(run_id: str, created: str, *groups: tuple[int, list[str]]) -> RunPlan:
    return RunPlan(run_id, created, ("src",),
                   tuple(Group(f"g{i}", tuple(uris), pages) for i, (pages, uris) in enumerate(groups)))


def failure(source: str, reason: str = "encrypted") -> FailureRecord:
    return FailureRecord(source=source, reason=reason, detail=f"{reason} detail", at=AT)


# ------------------------------------------------------------------ pure


def test_remaining_counts_planned_pdfs_without_a_result() -> None:
    plans = [plan("r1", "2026-11-30T01:00:00", (10, ["a", "b"]), (7, ["c"]), (5, ["d", "e"]))]
    done = {"a": 4, "d": 5}

    planned, left, pages = remaining_from_plans(plans, done)

    assert (planned, left) == (5, 3)  # b, c, e
    assert pages == (10 - 4) + 7 + 1  # e: its group is used up by d, but it weighs at least 1


def test_a_pdf_planned_twice_takes_its_newest_weight_and_counts_once() -> None:
    old = plan("r1", "2026-11-30T01:00:00", (20, ["a", "b"]))
    new = plan("r2", "2026-12-01T01:00:00", (3, ["b"]), (4, ["c"]))
    planned, left, pages = remaining_from_plans([new, old], {})
    assert (planned, left, pages) == (3, 3, 10 + 3 + 4)


def test_remaining_from_a_listing_estimates_unplanned_pdfs_from_done_ones() -> None:
    plans = [plan("r1", "2026-11-30T01:00:00", (6, ["a", "b"]))]
    total, left, pages, estimated = remaining_from_sources(
        ["a", "b", "x", "y"], plans, {"a": 3, "z": 5}
    )
    assert (total, left, estimated) == (4, 3, True)
    assert pages == 3 + 4 + 4  # b from the plan; x, y at the mean of done PDFs (3+5)/2


def test_summary_separates_failed_from_flagged_and_projects_time() -> None:
    results = [ResultMeta("a", 4, 1, 400, 100), ResultMeta("c", 2, 0, 200, 50)]
    records = [failure("b"), failure("d", "not_a_pdf"), failure("c", "page_error_rate")]
    plans = [plan("r1", "2026-11-30T01:00:00", (4, ["a"]), (6, ["b"]), (2, ["c"]), (1, ["d"]))]
    runs = [{"run_id": "r1", "finished_at": "2026-11-30T02:00:00", "pages_per_second": 2.0},
            {"run_id": "r0", "finished_at": "2026-11-29T02:00:00", "pages_per_second": 9.0}]

    stats = summarize("ws", results, records, plans, runs)

    assert (stats.done_pdfs, stats.done_pages, stats.fallback_pages) == (2, 6, 1)
    assert (stats.input_tokens, stats.output_tokens) == (600, 150)
    assert stats.failed_pdfs == 2 and stats.flagged_pdfs == 1
    assert stats.failed_by_reason == {"encrypted": 1, "not_a_pdf": 1}
    assert [f["source"] for f in stats.failures] == ["b", "d"]
    assert stats.remaining is not None
    assert (stats.remaining.pdfs, stats.remaining.pages) == (2, 7)
    assert stats.remaining.seconds == 3.5  # 7 pages at the last run's 2 pages/s
    assert stats.last_run is not None and stats.last_run["run_id"] == "r1"
    assert stats.runs == 2
    text = format_stats(stats)
    assert "failed:    2 PDFs" in text and "b: encrypted detail" in text
    assert "remaining: 2 of 4 PDFs from the recorded run plans, 7 pages" in text


def test_no_plan_means_remaining_is_unknown_not_zero() -> None:
    stats = summarize("ws", [], [], [], [])
    assert stats.remaining is None
    assert "remaining: unknown" in format_stats(stats)


def test_result_meta_reads_a_dolma_line_and_refuses_other_json() -> None:
    line = dolma_line({"id": "x", "text": "t", "metadata": {
        "Source-File": "s3://b/a.pdf", "pdf-total-pages": 3, "total-input-tokens": 10,
        "total-output-tokens": 5, "total-fallback-pages": 1}})
    assert result_meta(line) == ResultMeta("s3://b/a.pdf", 3, 1, 10, 5)
    with pytest.raises(ValueError):
        result_meta('{"id": "x"}')


def test_run_records_round_trip_and_keys() -> None:
    p = plan("r1", "2026-11-30T01:00:00", (10, ["a", "b"]))
    assert plan_from_json(plan_to_json(p)) == p
    assert run_key("r1", PLAN_NAME) == "runs/r1/plan.json"
    assert run_id_of("runs/r1/plan.json") == "r1"
    assert run_id_of("results/x.jsonl") is None
    with pytest.raises(ValueError):
        run_key("../x", PLAN_NAME)


def test_collect_reports_unreadable_objects_instead_of_failing(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.write_bytes(result_key("/in/a.pdf"), b"not json\n")
    store.write_bytes(ledger_key("/in/b.pdf"), record_to_json(failure("/in/b.pdf")).encode())
    stats = collect_stats(str(tmp_path))
    assert stats.done_pdfs == 0 and stats.failed_pdfs == 1
    assert len(stats.unreadable) == 1 and "results/" in stats.unreadable[0]


# ------------------------------------------------------------------ real runs



def stats_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pagegate.cli", "stats", *args],
        capture_output=True, text=True, env=dict(os.environ), timeout=120,
    )


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_stats_match_an_s3_workspace_written_by_a_real_run(
    s3_bucket: str, s3_client: Any, start_sim: Any
) -> None:
    for i in range(4):
        s3_client.put_object(Bucket=s3_bucket, Key=f"in/d{i}.pdf",
                             Body=samples.text_pdf(i + 1, title=f"D{i}", seed=i))
    s3_client.put_object(Bucket=s3_bucket, Key="in/locked.pdf", Body=samples.encrypted_pdf())
    s3_client.put_object(Bucket=s3_bucket, Key="in/junk.pdf", Body=b"<html>not a pdf</html>")
    sim = start_sim(profile="ci")
    workspace = f"s3://{s3_bucket}/out"

    state, summary = run_flow(sources=[f"s3://{s3_bucket}/in/"], workspace=workspace,
                              server_url=sim.base_url, pages_per_group=4)
    assert state.is_failed()

    proc = stats_cli(workspace, "--json")
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    assert stats["done_pdfs"] == summary["pdfs_ok"] == 4
    assert stats["done_pages"] == summary["pages"] == 1 + 2 + 3 + 4
    assert stats["input_tokens"] == summary["input_tokens"] > 0
    assert stats["output_tokens"] == summary["output_tokens"] > 0
    assert stats["failed_by_reason"] == {"encrypted": 1, "not_a_pdf": 1}
    assert stats["remaining"]["pdfs"] == 2 and stats["remaining"]["planned_pdfs"] == 6
    assert stats["runs"] == 1
    assert stats["last_run"]["pages"] == 10
    assert stats["last_run"]["chart"].startswith(f"s3://{s3_bucket}/out/runs/")
    assert not stats["unreadable"]

    # A document that disappears from the workspace is remaining work again, with its pages.
    s3_client.delete_object(Bucket=s3_bucket, Key=f"out/{result_key(f's3://{s3_bucket}/in/d3.pdf')}")
    proc = stats_cli(workspace)
    assert proc.returncode == 0, proc.stderr
    assert "done:      3 PDFs, 6 pages" in proc.stdout
    assert "remaining: 3 of 6 PDFs from the recorded run plans, 6 pages" in proc.stdout
    assert "encrypted: 1" in proc.stdout and "locked.pdf" in proc.stdout

    # With --source, remaining work comes from a fresh listing.
    s3_client.put_object(Bucket=s3_bucket, Key="in/new.pdf", Body=samples.text_pdf(2))
    proc = stats_cli(workspace, "--source", f"s3://{s3_bucket}/in/", "--json")
    remaining = json.loads(proc.stdout)["remaining"]
    assert remaining["basis"] == "sources"
    assert (remaining["planned_pdfs"], remaining["pdfs"]) == (7, 4)
    assert remaining["pages_estimated"] is True


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_stats_match_a_local_workspace_written_by_the_cli(tmp_path: Path, start_sim: Any) -> None:
    files = samples.write_sample_corpus(tmp_path / "in", good=3, include_bad=True)
    bad = [p for p in files if p.name.startswith("bad-")]
    sim = start_sim(profile="ci")
    from prefect.settings import PREFECT_API_URL

    run = subprocess.run(
        [sys.executable, "-m", "pagegate.cli", "run", str(tmp_path / "in"),
         "--workspace", str(tmp_path / "ws"), "--server", sim.base_url, "--json"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())},
    )
    assert run.returncode == 1, run.stdout + run.stderr
    summary = json.loads(run.stdout)  # the progress display kept off stdout

    proc = stats_cli(str(tmp_path / "ws"), "--json")
    stats = json.loads(proc.stdout)
    assert stats["done_pdfs"] == summary["pdfs_ok"] == len(files) - len(bad)
    assert stats["done_pages"] == summary["pages"]
    assert stats["failed_pdfs"] == len(bad) == summary["pdfs_failed"]
    ledger = [json.loads(p.read_text()) for p in (tmp_path / "ws" / "ledger").glob("*.json")]
    assert stats["failed_by_reason"] == {
        r: sum(1 for x in ledger if x["reason"] == r) for r in {x["reason"] for x in ledger}
    }
    assert stats["remaining"]["pdfs"] == len(bad)
    chart = Path(stats["last_run"]["chart"])
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
