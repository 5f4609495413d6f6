"""Two servers behind the router (one gate each); one is killed -9 mid-run.

Every page goes to the least-loaded server in rotation. The killed server leaves
rotation (its requests are refused, then its gate pauses); pages queued at it are routed
again at once, pages in flight on it fail with a capacity error and go back through the
router without spending an attempt. Every PDF comes out exactly once, none falls back.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

import pytest

from pagegate.sim.process import SimProcess
from tests.helpers import audit, busy, metric_total, run_flow, write_corpus

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]

SLOW = ("--time-scale", "0.25")


class RouterLog(logging.Handler):
    """The router's notes with their arrival times (a handler on its own logger)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.monotonic(), record.getMessage()))

    def first(self, pattern: str) -> tuple[float, str]:
        return next((t, m) for t, m in self.lines if re.search(pattern, m))

    def __enter__(self) -> RouterLog:
        logger = logging.getLogger("pagegate.router")
        logger.setLevel(logging.INFO)
        logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("pagegate.router").removeHandler(self)


def test_two_servers_one_killed_every_pdf_once(tmp_path: Path) -> None:
    pdfs = write_corpus(tmp_path / "in", 10, 3)
    ws = tmp_path / "ws"
    doomed = SimProcess(profile="ci", extra_args=SLOW).start()
    survivor = SimProcess(profile="ci", extra_args=SLOW).start()
    seen: dict[str, float] = {}

    def kill_mid_run() -> None:
        deadline = time.monotonic() + 60
        while len(list((ws / "results").glob("*.jsonl"))) < 2 or busy(doomed) == 0:
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)  # polling the workspace and the doomed server's queue
        seen["on_doomed"] = busy(doomed)
        seen["answered_by_doomed"] = metric_total(doomed.metrics_url, "vllm:request_success_total")
        seen["survivor_at_kill"] = metric_total(survivor.metrics_url, "vllm:request_success_total")
        assert doomed.process is not None
        doomed.process.kill()
        seen["killed"] = time.monotonic()

    killer = threading.Thread(target=kill_mid_run, daemon=True)
    killer.start()
    try:
        with RouterLog() as notes:
            state, summary = run_flow(
                sources=[str(tmp_path / "in")], workspace=str(ws),
                server_urls=[doomed.base_url, survivor.base_url],
                pages_per_group=3, workers=5, max_page_retries=1,
            )
            ended = time.monotonic()
        killer.join(timeout=10)
        answered_by_survivor = metric_total(survivor.metrics_url, "vllm:request_success_total")
    finally:
        doomed.stop()
        survivor.stop()

    result = audit(ws)
    assert "killed" in seen and seen["on_doomed"] > 0, "killed with pages on it"
    assert state.is_completed(), state.message
    assert result.sources == set(pdfs) and result.results == len(pdfs)
    assert result.duplicates == 0 and result.ledger == 0
    assert result.fallback_pages == 0 and summary["pages"] == sum(pdfs.values())
    assert seen["answered_by_doomed"] > 0 and answered_by_survivor > 0, "both servers had work"
    out_at, out_line = notes.first(rf"{re.escape(doomed.base_url)} out of rotation")
    drained = notes.first(rf"{re.escape(doomed.base_url)} drained")
    print(f"router, 2 servers, one killed -9: pages {summary['pages']}; answered by the killed "
          f"server before the kill {seen['answered_by_doomed']:.0f} (survivor by then "
          f"{seen['survivor_at_kill']:.0f}), by the survivor in all {answered_by_survivor:.0f}; "
          f"on the killed server "
          f"at the kill {seen['on_doomed']:.0f}; out of rotation {out_at - seen['killed']:.2f} s "
          f"after the kill ({out_line.split('(')[1].split(')')[0]}); {drained[1]}; run ended "
          f"{ended - seen['killed']:.2f} s after the kill; ledger {result.ledger}, fallback "
          f"pages {result.fallback_pages}, duplicates {result.duplicates}")
