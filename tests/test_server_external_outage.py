"""An external server (`server_url`, nothing to restart) that goes away mid-run.

The simulator is killed -9 while pages are on it and comes back on the same port after
a gap that is long against the backoff: the run waits it out (olmOCR gives up after 10
connection backoffs and exits the job; here only the time deadline counts), with the
gate (paused on failed scrapes, open again by itself) and without it (pages back off),
and no page spends an attempt on the outage. An outage past the deadline:
tests/test_server_outage_deadline.py.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from pathlib import Path

import pytest

from pagegate.sim.process import SimProcess, free_port
from tests.helpers import SLOW, audit, kill_when_busy, metric_total, run_flow, write_corpus

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]


class BackoffCounter(logging.Handler):
    """Capacity errors per page, from PageOcr's debug line for each backoff.

    Attached to the `pagegate.page` logger itself: Prefect reconfigures the root logger's
    handlers when its first flow run starts, which would drop pytest's caplog handler.
    """

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.counts: collections.Counter[tuple[str, int]] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("capacity error on") and isinstance(record.args, tuple):
            self.counts[(str(record.args[0]), int(record.args[1]))] += 1  # type: ignore[call-overload]

    def __enter__(self) -> BackoffCounter:
        logger = logging.getLogger("pagegate.page")
        self._level = logger.level
        logger.setLevel(logging.DEBUG)
        logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logger = logging.getLogger("pagegate.page")
        logger.removeHandler(self)
        logger.setLevel(self._level)


@pytest.mark.parametrize("gate", [True, False], ids=["gate", "no-gate"])
def test_a_long_outage_of_an_external_server_is_waited_out(tmp_path: Path, gate: bool) -> None:
    pdfs = write_corpus(tmp_path / "in", 6, 3)
    ws = tmp_path / "ws"
    port = free_port()
    gap = 4.5  # at least; at most 0.3 s between retries
    first = SimProcess(profile="ci", port=port, extra_args=SLOW).start()
    second = SimProcess(profile="ci", port=port)
    times: dict[str, float] = {}
    counter = BackoffCounter()

    def most_backoffs() -> int:
        counter.acquire()  # logging.Handler.handle holds the same lock around emit
        try:
            return max(counter.counts.values(), default=0)
        finally:
            counter.release()

    def outage() -> None:
        times["killed"] = kill_when_busy(first, ws, committed=1)
        # The outage lasts the gap and, without the gate, until a page has backed off more
        # than olmOCR's 10 times: how many retries a loaded machine fits in a fixed gap
        # (each one renders its page again) decides nothing.
        ends = time.monotonic() + gap
        deadline = ends + 90
        while time.monotonic() < ends or (not gate and most_backoffs() <= 10):
            if time.monotonic() > deadline:
                return  # the run's own asserts say what went wrong
            time.sleep(0.05)  # the outage itself: nothing listens on the port
        second.start()
        times["back"] = time.monotonic()
        while metric_total(second.metrics_url, "vllm:request_success_total") == 0:
            time.sleep(0.01)  # polling for the first page answered after the outage
        times["first_answer"] = time.monotonic()

    thread = threading.Thread(target=outage, daemon=True)
    thread.start()
    try:
        with counter:
            state, summary = run_flow(
                sources=[str(tmp_path / "in")], workspace=str(ws), server_url=first.base_url,
                pages_per_group=3, workers=4, gate_enabled=gate, max_concurrent_requests=16,
                max_page_retries=1,  # a page that lost an attempt to the outage would fall back
                capacity_backoff_max_seconds=0.3, server_unavailable_after_seconds=120,
            )
        thread.join(timeout=30)
    finally:
        first.stop()
        second.stop()

    result = audit(ws)
    failures = counter.counts
    assert {"killed", "back", "first_answer"} <= set(times), "the outage happened mid-run"
    assert state.is_completed(), state.message
    assert result.sources == set(pdfs) and result.results == len(pdfs)
    assert result.duplicates == 0 and result.ledger == 0
    assert result.fallback_pages == 0 and summary["fallback_pages"] == 0
    assert summary["pages"] == sum(pdfs.values())
    if not gate:
        assert max(failures.values()) > 10, "a page outlasted olmOCR's 10 connection backoffs"
    recovery = times["first_answer"] - times["back"]
    print(f"external outage ({'gate' if gate else 'no gate'}): down {times['back'] - times['killed']:.1f} s, "
          f"pages that saw errors {len(failures)}, most backoffs of one page "
          f"{max(failures.values(), default=0)}, first page answered {recovery:.2f} s after "
          f"the server was back; PDFs {result.results}/{len(pdfs)}, ledger {result.ledger}, "
          f"fallback pages {result.fallback_pages}")
