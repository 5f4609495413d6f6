"""What the run's own process holds: no PDF library, no Prefect server, no line per
committed PDF."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from pagegate.ocr.outcomes import GroupOutcome, PdfOutcome, RunTotals


def test_a_compact_outcome_keeps_the_totals_and_names_only_what_the_summary_names() -> None:
    pdfs = (
        PdfOutcome("a", "ok", pages=3, input_tokens=30, output_tokens=9),
        PdfOutcome("b", "failed", reason="unreadable", detail="cannot open"),
        PdfOutcome("c", "ok", pages=2, fallback_pages=1, reason="page_error_rate"),
        PdfOutcome("d", "skipped"),
        PdfOutcome("e", "ok", pages=5, fallback_pages=0, input_tokens=50, output_tokens=20),
    )
    full = GroupOutcome("g1", pdfs)
    compact = full.compact()

    assert [p.uri for p in compact.pdfs] == ["b", "c"]
    assert compact.count == full.count == 5
    assert compact.ok_pages == full.ok_pages == 10
    assert asdict(RunTotals.of([compact])) == asdict(RunTotals.of([full]))
    assert compact.compact() == compact


def test_the_run_process_imports_no_pdf_library_and_no_prefect_server() -> None:
    """pdfium, pypdf, PIL and numpy live in the workers; Prefect's server in its own process."""
    heavy = ("pypdf", "pypdfium2", "PIL", "numpy", "imagecodecs", "reportlab", "matplotlib",
             "prefect.server.api.server", "sqlalchemy")
    code = ("import sys, pagegate.cli.app, pagegate.cli.run, flows.ocr_pdfs, flows.reprocess, "
            "pagegate.ocr.job, pagegate.cli.prefect_server; "
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_run_chart_comes_from_a_child_process() -> None:
    from pagegate.report.chart import draw_run_chart
    from tests.test_progress import sample

    png = asyncio.run(draw_run_chart([sample(0, 0), sample(1, 5, releases=2)], title="t"))
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
