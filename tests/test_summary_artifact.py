"""The run summary artifact as the Prefect UI shows it: one title, a header on every
table, the failed PDFs, and the run chart inlined whatever the workspace."""

from __future__ import annotations

import base64
import re

from pagegate.ocr.outcomes import GroupOutcome, PdfOutcome, RunTotals, Tally
from pagegate.report.summary import (
    CHART_INLINE_MAX_BYTES,
    RunSummary,
    summary_headline,
    summary_markdown,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def _totals() -> RunTotals:
    bad = PdfOutcome(uri="/in/bad.pdf", status="failed", reason="not_a_pdf", detail="no header")
    return RunTotals(pdfs_ok=3, pdfs_failed=1, pages=6, failures=[bad])


def _tables(markdown: str) -> list[list[str]]:
    """Each table's header cells (the line above its |---| line)."""
    lines = markdown.splitlines()
    return [
        [c.strip() for c in lines[i - 1].strip("|").split("|")]
        for i, line in enumerate(lines) if re.fullmatch(r"\|(---\|)+", line)
    ]


def test_no_heading_repeats_the_title_and_every_table_has_a_header() -> None:
    gate = {"kind": "gate", "releases": 1, "pauses": 0,
            "servers": [{"url": "http://a/v1", "in_rotation": True, "answered": 6,
                         "rerouted": 0, "refusals": 0}]}
    text = summary_markdown(_totals(), elapsed_seconds=2.0, gate=gate)
    assert not text.startswith("#") and "# pagegate run summary" not in text
    headers = _tables(text)
    assert len(headers) == 4  # totals, failed PDFs, admission, servers
    assert all(all(cells) for cells in headers), headers


def test_the_failed_pdfs_come_before_the_gates_figures() -> None:
    text = summary_markdown(_totals(), elapsed_seconds=2.0, gate={"releases": 1, "pauses": 0})
    assert text.index("| /in/bad.pdf | not_a_pdf |") < text.index("## admission")


def test_the_chart_is_inlined_and_a_local_path_is_text_not_a_link() -> None:
    text = summary_markdown(_totals(), elapsed_seconds=2.0, chart_uri="/ws/runs/r/chart.png",
                            chart_png=PNG)
    inline = re.search(r"!\[run chart\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", text)
    assert inline and base64.b64decode(inline.group(1)) == PNG
    assert "`/ws/runs/r/chart.png`" in text and "](/ws" not in text and "file:" not in text


def test_an_s3_chart_keeps_its_presigned_link_and_a_huge_one_is_only_linked() -> None:
    link = "https://b.s3.amazonaws.com/ws/runs/r/chart.png?X-Amz-Signature=abc"
    huge = PNG + b"\x00" * CHART_INLINE_MAX_BYTES
    text = summary_markdown(_totals(), elapsed_seconds=2.0, chart_uri="s3://b/ws/runs/r/chart.png",
                            chart_link=link, chart_png=huge)
    assert f"]({link})" in text and "s3://b/ws/runs/r/chart.png" in text
    assert "data:image" not in text


def test_the_headline_counts_the_pdfs_the_plan_skipped_too() -> None:
    assert summary_headline(_totals(), elapsed_seconds=2.04) == (
        "3 PDF(s) done, 1 failed; 6 pages in 2.0 s")
    summary = RunSummary(totals=_totals(), already_done=5, elapsed_seconds=1.0)
    assert summary.headline() == "3 PDF(s) done, 1 failed, 5 skipped; 6 pages in 1.0 s"
    assert "| PDFs skipped (already committed) | 5 |" in summary_markdown(
        _totals(), elapsed_seconds=1.0, already_done=5)


def test_the_summary_names_the_other_runs_and_what_they_did() -> None:
    """Groups another run did (pagegate.ocr.turns marks them `by`) count as done, and the
    summary says by whom; the message splits the count the same way."""
    mine = GroupOutcome("g1", (), Tally(ok=2, pages=4))
    theirs = GroupOutcome("g2", (), Tally(ok=3, pages=6), by="calm-owl")
    totals = RunTotals.of([mine, theirs])
    assert (totals.pdfs_ok, totals.others_ok, totals.this_run_ok) == (5, 3, 2)
    text = summary_markdown(totals, elapsed_seconds=2.0)
    assert "| PDFs done | 5 |" in text
    assert "| of them by other runs | 3 (calm-owl) |" in text
    summary = RunSummary.of([mine, theirs], already_done=0, elapsed_seconds=2.0)
    assert summary.message() == "5 PDF(s) done (this run 2, others 3), 10 pages"
    alone = summary_markdown(RunTotals.of([mine]), elapsed_seconds=2.0)
    assert "other runs" not in alone
