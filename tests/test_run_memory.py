"""What the run's own process holds: no PDF library, no Prefect server, no line per
committed PDF."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from pagegate import samples
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
    code = ("import sys, pagegate.cli.app, pagegate.cli.run, pagegate.flows.ocr_pdfs, pagegate.flows.reprocess, "
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


@pytest.mark.slow
def test_a_run_without_a_prefect_server_starts_and_stops_its_own(
    tmp_path: Path, start_sim: Any
) -> None:
    """No PREFECT_API_URL: the run starts the temporary server itself, records the flow
    run there, sends its last logs before stopping it, and exits cleanly."""
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.pdf").write_bytes(samples.text_pdf(2))
    sim = start_sim(profile="ci", time_scale=20.0)
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pagegate.cli", "run", str(src), "--workspace",
         str(tmp_path / "ws"), "--server", sim.base_url, "--json"],
        cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert (summary["pdfs_ok"], summary["pages"]) == (1, 2)
    assert "Error logging to API" not in proc.stderr  # nothing sent after the server stopped
    assert (tmp_path / "prefect" / "prefect.db").exists()  # the run was recorded there
