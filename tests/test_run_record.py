"""The run's record and chart link (pagegate.report.monitor), as `pagegate stats` reads them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from pagegate.io.local import LocalStore
from pagegate.ocr.outcomes import RunTotals
from pagegate.report.monitor import browser_link, run_record
from pagegate.report.progress import ProgressSample

FINAL = ProgressSample(
    elapsed=10.0, pages_planned=40, pages_settled=40, pages_done=38, fallback_pages=2,
    pdfs_planned=4, pdfs_done=4, pdfs_failed=0, groups_planned=2, groups_done=2,
    input_tokens=0, output_tokens=0, in_flight=0, releases=3, pauses=1,
)


def record(elapsed: float) -> dict[str, object]:
    return run_record(
        run_id="r1", run_count=2, sources=("s3://b/in/",), workspace="/w",
        started_at=datetime(2026, 1, 1, 12, 0, 0, 123, tzinfo=UTC),
        finished_at=datetime(2026, 1, 1, 12, 0, 10, tzinfo=UTC),
        totals=RunTotals(pdfs_ok=4, pages=40, input_tokens=4000, output_tokens=1000),
        elapsed_seconds=elapsed, final=FINAL, chart_uri="/w/runs/r1/chart.png",
    )


def test_record_gives_rates_plan_and_gate_figures() -> None:
    got = record(8.0)
    assert (got["pages_per_second"], got["tokens_per_second"]) == (5.0, 625.0)
    assert (got["pdfs_planned"], got["pages_planned"]) == (4, 40)
    assert (got["gate_releases"], got["gate_pauses"], got["run_count"]) == (3, 1, 2)
    assert got["started_at"] == "2026-01-01T12:00:00+00:00"
    assert got["sources"] == ["s3://b/in/"]


def test_a_run_with_no_elapsed_time_has_zero_rates() -> None:
    got = record(0.0)
    assert (got["pages_per_second"], got["tokens_per_second"]) == (0.0, 0.0)


def test_a_local_chart_gets_no_browser_link(tmp_path: Path) -> None:
    """A file:// link is dead in the Prefect UI; the summary inlines the chart instead."""
    store = LocalStore(tmp_path)
    assert browser_link(store, "runs/r1/chart.png") is None
