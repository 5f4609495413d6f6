"""Every model profile end to end: the real CLI against the simulator, which reads the
test's PDFs (`pagegate sim --pdfs`) and answers in each profile's own reply format.

One simulator serves the module; it knows each request's profile by its prompt. The
corpus:
- `report.pdf`: two pages with known lines at known places, the second turned by
  /Rotate 90, read by the model;
- `cut.pdf`: a page whose every reply runs out of tokens (finish_reason "length");
- `garbled.pdf`: a page whose every reply is malformed in the profile's format.
Both of the last two are retried through every attempt, then fall back to their text
layer, as README's ledger table documents: the document is written with the page
flagged, and a `page_error_rate` record sits beside it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pypdfium2 as pdfium
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pypdf import PdfWriter
from reportlab.lib.pagesizes import letter
from reportlab.pdfbase.pdfmetrics import stringWidth
from reportlab.pdfgen import canvas

from pagegate.vlm.profiles import PROFILES, get_profile
from tests.fixtures.sim import SimServer, launch_sim
from tests.helpers import read_ledger, read_results

pytestmark = pytest.mark.slow

FONT, SIZE = "Helvetica", 14
PAGE_W, PAGE_H = letter
# (text, x, baseline y) in PDF points, origin bottom-left, on the first page of report.pdf
REPORT_LINES = (
    ("Quarterly report of the harbour office", 72.0, 700.0),
    ("Cargo volume rose by four percent", 72.0, 660.0),
    ("Berth nine reopens in March", 300.0, 400.0),
)
TURNED_LINES = ("A page printed sideways", "Its second line of text")
CUT_TEXT = "This page runs out of tokens"
GARBLED_TEXT = "This page confuses the model"
ATTEMPTS = 8  # RunConfig's max page attempts, olmOCR's MAX_RETRIES
BOX_TOLERANCE_PT = 2.0
"""How far a sidecar box may sit from the text's own box: the coarsest grid (DocTags'
0..500) is 1.6 pt a step on a letter page, plus pdfium's glyph boxes against the font's."""


def write_pdf(path: Path, pages: list[list[tuple[str, float, float]]], rotate: list[int]) -> None:
    """Letter pages with these lines; each page then gets its /Rotate (pypdf), so the
    lines keep their place on the page as drawn and turn with it on display."""
    c = canvas.Canvas(str(path), pagesize=letter)
    for lines in pages:
        c.setFont(FONT, SIZE)
        for text, x, y in lines:
            c.drawString(x, y, text)
        c.showPage()
    c.save()
    writer = PdfWriter(clone_from=str(path))
    for page, turn in zip(writer.pages, rotate, strict=True):
        if turn:
            page.rotate(turn)
    writer.write(str(path))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("profiles") / "pdfs"
    root.mkdir()
    turned = [(t, 72.0, 700.0 - 30 * i) for i, t in enumerate(TURNED_LINES)]
    write_pdf(root / "report.pdf", [list(REPORT_LINES), turned], [0, 90])
    write_pdf(root / "cut.pdf", [[(CUT_TEXT, 72.0, 700.0)]], [0])
    write_pdf(root / "garbled.pdf", [[(GARBLED_TEXT, 72.0, 700.0)]], [0])
    return root


@pytest.fixture(scope="module")
def sim(corpus: Path) -> Iterator[SimServer]:
    server = launch_sim(profile="ci", pdfs=[str(corpus)], cut_pages="runs out of tokens",
                        malformed_pages="confuses the model")
    yield server
    server.stop()


def replies_by_reason(sim: SimServer) -> dict[str, float]:
    counts: dict[str, float] = {}
    text = httpx.get(sim.metrics_url, timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vllm:request_success_total":
                reason = sample.labels["finished_reason"]
                counts[reason] = counts.get(reason, 0.0) + sample.value
    return counts


def expected_box(text: str, x: float, y: float) -> tuple[float, float, float, float]:
    """The line's box from the font's metrics (Helvetica's ascent 718, descent -207 per
    1000), in the sidecar's frame: points from the top-left corner, y down."""
    width = stringWidth(text, FONT, SIZE)
    return x, PAGE_H - (y + 0.718 * SIZE), x + width, PAGE_H - (y - 0.207 * SIZE)


def by_source(docs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {Path(d["metadata"]["Source-File"]).name: d for d in docs.values()}


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_a_profile_end_to_end_against_the_simulator(
    name: str, corpus: Path, sim: SimServer, tmp_path: Path, api_env: dict[str, str]
) -> None:
    profile = get_profile(name)
    ws = tmp_path / "ws"
    before = replies_by_reason(sim)
    proc = subprocess.run(
        [sys.executable, "-m", "pagegate.cli", "run", str(corpus), "--workspace", str(ws),
         "--server", sim.base_url, "--profile", name, "--layout", "--markdown",
         "--max-fallback-share", "1"],
        env=api_env, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    after = replies_by_reason(sim)
    sent = {k: n - before.get(k, 0) for k, n in after.items() if n > before.get(k, 0)}
    # the three read pages once each, the two others through every attempt
    assert sent == {"stop": 2 + ATTEMPTS, "length": ATTEMPTS}, sent

    docs = by_source(read_results(ws))
    assert set(docs) == {"report.pdf", "cut.pdf", "garbled.pdf"}
    report = docs["report.pdf"]
    assert report["attributes"]["is_fallback_page"] == [False, False]
    for text, _, _ in REPORT_LINES:
        assert text in report["text"]
    for text in TURNED_LINES:
        assert text in report["text"]
    assert report["metadata"]["profile"] == name
    markdown = (ws / "markdown" / "report.md").read_text()
    assert all(text in markdown for text, _, _ in REPORT_LINES)
    for fallen, text in (("cut.pdf", CUT_TEXT), ("garbled.pdf", GARBLED_TEXT)):
        assert docs[fallen]["attributes"]["is_fallback_page"] == [True]
        assert docs[fallen]["text"].strip() == text
    reasons = {Path(r["source"]).name: r["reason"] for r in read_ledger(ws).values()}
    assert reasons == {"cut.pdf": "page_error_rate", "garbled.pdf": "page_error_rate"}

    layout = [json.loads(line) for line in
              (ws / "layout" / f"{report['id']}.jsonl").read_text().splitlines()]
    assert [row["page"] for row in layout] == [1, 2]
    if not profile.gives_layout:
        assert all(row["blocks"] == [] for row in layout)
        return
    first = {b["text"]: b["bbox"] for b in layout[0]["blocks"]}
    for text, x, y in REPORT_LINES:
        box = first[text]
        want = expected_box(text, x, y)
        assert all(abs(a - b) <= BOX_TOLERANCE_PT for a, b in zip(box, want, strict=True)), (text, box, want)
    # the turned page: displayed landscape, each line's box holds the line's own ink
    turned = layout[1]
    assert (turned["width_pt"], turned["height_pt"]) == (PAGE_H, PAGE_W)
    assert sorted(b["text"] for b in turned["blocks"]) == sorted(TURNED_LINES)
    doc = pdfium.PdfDocument(str(corpus / "report.pdf"))
    try:
        image = doc[1].render(scale=2).to_pil().convert("L")
    finally:
        doc.close()
    for block in turned["blocks"]:
        x0, y0, x1, y1 = (round(v * 2) for v in block["bbox"])
        ink = np.asarray(image.crop((x0, y0, x1, y1))) < 128
        assert ink.mean() > 0.05, block
