"""The run summary: its data and messages, the artifact's markdown (totals, the gate's
figures, one row per routed server) and the failure table."""

from __future__ import annotations

from pagegate.ocr.outcomes import GroupOutcome, PdfOutcome, RunTotals
from pagegate.report.summary import RunSummary, failure_rows, named, summary_markdown


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


def _outcomes() -> list[GroupOutcome]:
    ok = PdfOutcome(uri="a.pdf", status="ok", pages=3, input_tokens=30, output_tokens=9)
    flagged = PdfOutcome(uri="b.pdf", status="ok", pages=4, fallback_pages=2,
                         reason="page_error_rate", detail="2 of 4 pages")
    skipped = PdfOutcome(uri="c.pdf", status="skipped")
    failed = PdfOutcome(uri="d.pdf", status="failed", reason="unreadable", detail="no header")
    stopped = PdfOutcome(uri="e.pdf", status="stopped")  # the workspace stopped taking writes
    return [GroupOutcome("g1", (ok, flagged)), GroupOutcome("g2", (skipped, failed, stopped))]


def test_summary_data_counts_once_and_lists_flagged_and_failed_pdfs() -> None:
    summary = RunSummary.of(_outcomes(), already_done=5, elapsed_seconds=2.34567,
                            chart_uri="/w/runs/r/chart.png")
    assert [p.uri for p in summary.flagged] == ["b.pdf"]
    assert summary.as_dict() == {
        "pdfs_ok": 2, "pdfs_ok_by_others": 0, "other_runs": [],
        "pdfs_failed": 1, "pdfs_skipped": 6, "pdfs_stopped": 1, "pages": 7,
        "fallback_pages": 2,
        "input_tokens": 30, "output_tokens": 9, "elapsed_seconds": 2.346,
        "chart": "/w/runs/r/chart.png",
        "failed": [{"source": "d.pdf", "reason": "unreadable", "detail": "no header"}],
        "flagged": [{"source": "b.pdf", "reason": "page_error_rate", "detail": "2 of 4 pages"}],
    }
    assert summary.failed
    assert summary.message() == "1 PDF(s) failed: d.pdf"
    assert summary.flagged_message() == (
        "1 PDF(s) committed with fallback pages flagged (ledger: page_error_rate): b.pdf"
    )


def test_a_clean_run_says_what_it_did_and_an_empty_one_has_every_key() -> None:
    clean = RunSummary.of([GroupOutcome("g", (PdfOutcome("a", "ok", 3),))],
                          already_done=0, elapsed_seconds=1.0)
    assert not clean.failed and clean.flagged_message() is None
    assert clean.message() == "1 PDF(s) done, 3 pages"
    empty = RunSummary().as_dict()
    assert empty["pdfs_ok"] == 0 and empty["failed"] == [] and empty["flagged"] == []
    assert set(empty) == set(clean.as_dict())


def test_messages_name_twenty_pdfs_and_count_the_rest() -> None:
    uris = [f"{i}.pdf" for i in range(23)]
    assert named(uris) == ", ".join(uris[:20]) + " (+3 more)"
    assert named(uris[:2]) == "0.pdf, 1.pdf"
    assert named(uris, shown=5).endswith("4.pdf (+18 more)")
