"""The operator's view of a run, in a real browser: the Prefect UI's run page.

One `pagegate run` (3 good PDFs and one that is not a PDF, against the simulator)
reports to a Prefect server that serves its UI (tests/fixtures/prefect_ui.py), as an
operator's run does with PREFECT_API_URL set. Headless Chromium (tests/fixtures/browser.py)
then opens the run's page in the classic UI (where Prefect's own "View at" links go) and
in the v2 UI (where its dashboard goes), and the tests read what is rendered: the three
artifacts on the Artifacts tab, the summary's counts, headers and inlined chart, the
failed PDF with its reason, the progress at 100 %, and a log without an empty
traceback. Screenshots go to a temporary folder; their paths are printed.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pagegate import samples
from tests.fixtures.browser import Browser
from tests.fixtures.prefect_ui import PrefectUiServer
from tests.fixtures.sim import launch_sim
from tests.helpers import REPO

pytestmark = pytest.mark.slow

ARTIFACTS = ("ocr-run-summary", "ocr-progress", "ocr-failed-pdfs")
ROWS_JS = ("return [...document.querySelectorAll('tr')]"
           ".map(r => [...r.children].map(c => c.innerText.trim()))")
HEADERS_JS = "return [...document.querySelectorAll('th')].map(c => c.innerText.trim())"
IMAGES_JS = ("return [...document.images].filter(i => i.src.startsWith('data:image/png;base64,'))"
             ".map(i => [i.complete, i.naturalWidth])")


@dataclass(frozen=True)
class OperatorRun:
    ui: PrefectUiServer
    run_id: str
    bad_pdf: str
    cli_output: str


@pytest.fixture(scope="module")
def run(prefect_ui: PrefectUiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorRun]:
    root = tmp_path_factory.mktemp("ui-run")
    src, workspace = root / "pdfs", root / "ws"
    src.mkdir()
    for i in range(3):
        (src / f"d{i}.pdf").write_bytes(samples.text_pdf(2, title=f"Doc {i}", seed=i))
    bad = src / "bad.pdf"
    bad.write_bytes(b"this upload is not a PDF")
    sim = launch_sim(profile="ci")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pagegate.cli", "run", str(src), "--workspace", str(workspace),
             "--server", sim.base_url],
            cwd=REPO, env=prefect_ui.env(), capture_output=True, text=True, timeout=180,
        )
    finally:
        sim.stop()
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-4000:]  # one PDF failed
    (run_dir,) = (workspace / "runs").iterdir()  # runs/<flow run id>/
    yield OperatorRun(prefect_ui, run_dir.name, str(bad), output)


def _report(capsys: pytest.CaptureFixture[str], *shots: Path) -> None:
    with capsys.disabled():
        for shot in shots:
            print(f"\nscreenshot: {shot}")


def _rows(browser: Browser) -> list[list[str]]:
    rows: list[list[str]] = browser.driver.execute_script(ROWS_JS)
    return rows


def _row(browser: Browser, first: str) -> list[str] | None:
    return next((r for r in _rows(browser) if r and r[0] == first), None)


def _open_artifact(browser: Browser, run: OperatorRun, key: str, *, v2: bool) -> None:
    """From the run page's Artifacts tab, open one artifact, as an operator clicks it."""
    prefix = "/v2" if v2 else ""
    browser.open(f"{run.ui.url}{prefix}/runs/flow-run/{run.run_id}")
    browser.click_text("Artifacts")
    browser.wait_text(*ARTIFACTS)
    browser.click_text(key)
    browser.wait(lambda: "/artifacts/artifact/" in browser.driver.current_url,
                 f"the {key} artifact's page")


def test_the_cli_log_has_no_empty_traceback(run: OperatorRun) -> None:
    assert "NoneType: None" not in run.cli_output
    assert "Task run failed with state" not in run.cli_output  # the duplicate line
    assert "Finished in state Failed('1 of 4 PDF(s) failed" in run.cli_output
    assert run.cli_output.count("1 PDF(s) failed: ") == 1  # the flow's final state, once


@pytest.mark.parametrize("v2", [False, True], ids=["ui", "ui-v2"])
def test_the_artifacts_tab_lists_the_three_artifacts_and_progress_reads_100(
    run: OperatorRun, browser: Browser, capsys: pytest.CaptureFixture[str], v2: bool
) -> None:
    prefix = "/v2" if v2 else ""
    browser.open(f"{run.ui.url}{prefix}/runs/flow-run/{run.run_id}")
    browser.click_text("Artifacts")
    text = browser.wait_text(*ARTIFACTS, "(86%)")
    assert "6/7 pages converted (86%)" in text  # 3 x 2 pages of 7 planned (the bad PDF's 1)
    assert "3 PDF(s) done, 1 failed; 6 pages" in text  # the summary's card
    browser.resize(1280, 1200)
    tab = browser.shot(f"artifacts-tab{'-v2' if v2 else ''}")
    browser.click_text("ocr-progress")
    browser.wait_text("100%")
    _report(capsys, tab, browser.shot(f"progress{'-v2' if v2 else ''}"))


@pytest.mark.parametrize("v2", [False, True], ids=["ui", "ui-v2"])
def test_the_summary_shows_the_counts_under_one_title_with_headers_and_the_chart(
    run: OperatorRun, browser: Browser, capsys: pytest.CaptureFixture[str], v2: bool
) -> None:
    _open_artifact(browser, run, "ocr-run-summary", v2=v2)
    browser.wait(lambda: _row(browser, "PDFs done"), "the summary's totals table")
    assert _row(browser, "PDFs done") == ["PDFs done", "3"]
    assert _row(browser, "PDFs failed") == ["PDFs failed", "1"]
    assert _row(browser, "pages") == ["pages", "6"]
    assert _row(browser, run.bad_pdf) == [run.bad_pdf, "not_a_pdf"]
    headers: list[str] = browser.driver.execute_script(HEADERS_JS)
    assert headers and all(headers), f"a table without a header: {headers}"
    text = browser.text()
    assert text.count("3 PDF(s) done, 1 failed") == 1  # the title, once
    assert "pagegate run summary" not in text
    # The chart is inlined and decoded by the browser; no link into the worker's disk.
    images: list[list[Any]] = browser.wait(
        lambda: [i for i in browser.driver.execute_script(IMAGES_JS) if i[0] and i[1] > 0],
        "the run chart, decoded")
    assert images[0][1] >= 500
    assert browser.elements("a[href^='file:']") == []
    browser.resize(1280, 1900)  # totals, failed PDFs and chart in one picture
    summary = browser.shot(f"summary{'-v2' if v2 else ''}")
    browser.scroll_to("img[alt='run chart']")
    _report(capsys, summary, browser.shot(f"summary-chart{'-v2' if v2 else ''}"))


@pytest.mark.parametrize("v2", [False, True], ids=["ui", "ui-v2"])
def test_the_failed_pdf_table_names_the_bad_pdf_and_its_reason(
    run: OperatorRun, browser: Browser, capsys: pytest.CaptureFixture[str], v2: bool
) -> None:
    _open_artifact(browser, run, "ocr-failed-pdfs", v2=v2)
    browser.wait_text(run.bad_pdf, "not_a_pdf", "no %PDF- header")
    headers: list[str] = browser.driver.execute_script(HEADERS_JS)
    assert {"source", "reason", "detail"} <= set(headers), headers
    _report(capsys, browser.shot(f"failed-pdfs{'-v2' if v2 else ''}"))


def test_the_runs_log_in_the_ui_has_no_empty_traceback(
    run: OperatorRun, browser: Browser, capsys: pytest.CaptureFixture[str]
) -> None:
    browser.open(f"{run.ui.url}/runs/flow-run/{run.run_id}")  # the Logs tab is the default
    text = browser.wait_text("Finished in state Failed('1 PDF(s) failed")
    assert "NoneType" not in text
    assert "Task run failed with state" not in text
    assert "1 of 4 PDF(s) failed" in text  # the group task's own final line stays
    _report(capsys, browser.shot("logs"))
