"""An external server that stays away past a small `server_unavailable_after_seconds`.

The affected PDFs are recorded `server_unavailable`, the PDFs written before the outage
stay written, nothing is both, and the flow run ends normally (Failed, with its table).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from pagegate.sim.process import SimProcess
from tests.helpers import SLOW, audit, kill_when_busy, read_ledger, run_flow, write_corpus

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]


def test_an_outage_past_the_deadline_records_server_unavailable(tmp_path: Path) -> None:
    pdfs = write_corpus(tmp_path / "in", 8, 3)
    ws = tmp_path / "ws"
    sim = SimProcess(profile="ci", extra_args=SLOW).start()
    killed: list[float] = []
    thread = threading.Thread(target=lambda: killed.append(kill_when_busy(sim, ws, 2)),
                              daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        state, summary = run_flow(
            sources=[str(tmp_path / "in")], workspace=str(ws), server_url=sim.base_url,
            pages_per_group=3, workers=4, capacity_backoff_max_seconds=0.5,
            server_unavailable_after_seconds=2.0,
        )
        ended = time.monotonic()
        thread.join(timeout=10)
    finally:
        sim.stop()

    result = audit(ws)
    ledger = read_ledger(ws)
    assert killed, "killed mid-run"
    assert state.is_failed() and summary["pdfs_failed"] == len(ledger) > 0
    assert {rec["reason"] for rec in ledger.values()} == {"server_unavailable"}
    assert result.results >= 2 and result.duplicates == 0
    assert result.sources | set(ledger) == set(pdfs), "every PDF written or recorded"
    assert not result.sources & set(ledger), "never both"
    print(f"outage past a 2 s deadline: written {result.results}, recorded server_unavailable "
          f"{len(ledger)}; run ended {ended - killed[0]:.1f} s after the kill "
          f"({ended - started:.1f} s in all)")
