"""The run summary artifact: totals, the gate's figures, and one row per routed server."""

from __future__ import annotations

from pagegate.ocr.outcomes import PdfOutcome, RunTotals
from pagegate.report.summary import failure_rows, summary_markdown


def _totals() -> RunTotals:
    failed = PdfOutcome(uri="s3://b/in/d.pdf", status="failed", pages=0, reason="unreadable",
                        detail="x" * 400)
    return RunTotals(pdfs_ok=5, pdfs_failed=1, pages=10, input_tokens=100, output_tokens=50,
                     failures=[failed])


def test_summary_gives_rates_and_failed_pdfs() -> None:
    text = summary_markdown(_totals(), elapsed_seconds=5.0)
    assert "| PDFs done | 5 |" in text
    assert "| pages/s | 2.00 |" in text
    assert "| output tokens/s | 10 |" in text
    assert "| s3://b/in/d.pdf | unreadable |" in text
    assert "## admission" not in text  # no gate figures given


def test_router_snapshot_becomes_one_row_per_server_and_nested_values_stay_out() -> None:
    gate = {
        "kind": "router", "releases": 4, "pauses": 1, "in_rotation": 1,
        "servers": [
            {"url": "http://a:8000/v1", "in_rotation": False, "answered": 6, "rerouted": 5,
             "refusals": 2, "admission": {"releases": 1}},
            {"url": "http://b:8000/v1", "in_rotation": True, "answered": 24, "rerouted": 0,
             "refusals": 0, "admission": {"releases": 3}},
        ],
    }
    text = summary_markdown(_totals(), elapsed_seconds=5.0, gate=gate)
    assert "| gate releases / pauses | 4 / 1 |" in text
    assert "| http://a:8000/v1 | no | 6 | 5 | 2 |" in text
    assert "| http://b:8000/v1 | yes | 24 | 0 | 0 |" in text
    assert "| servers |" not in text  # the list is a table of its own, not a row


def test_failure_rows_cut_long_details() -> None:
    (row,) = failure_rows(_totals().failures)
    assert row["reason"] == "unreadable" and len(row["detail"]) == 300
