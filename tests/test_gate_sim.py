"""A burst through the production gate keeps the simulated server's queue small, where the
same burst without a gate floods it.

Both runs go through the production page path and the simulator's HTTP app in virtual
time (pagegate/sim/virtual.py), so the queue figures are exact. The gate's time
constants are scaled down the same way (cooldown 2 s, poll 0.1 s) so it goes through
several releases within a burst that drains in ~8 s; the wall-clock crossing of the
process boundary has its own smoke test (tests/test_bench_strategies.py).
"""

from __future__ import annotations

import dataclasses

from pagegate.admission import GateConfig
from pagegate.sim.profiles import PROFILES
from pagegate.sim.strategies import fixed, gate
from pagegate.sim.virtual import Workload, run_virtual

BURST_PAGES = 160
SLOTS = 4
WAITING_BOUND = 2 * SLOTS
"""With the gate, the simulator's waiting queue stays at or below this."""
SCALED_GATE = GateConfig(
    cooldown_seconds=2.0,
    poll_interval_seconds=0.1,
    stale_after_seconds=3.0,
    scrape_timeout_seconds=2.0,
    drain_window_seconds=4.0,
    unit_pages=32,
)
# Crash thresholds off: the point is to measure the queue without a gate, not to die.
SERVER = dataclasses.replace(PROFILES["ci"], max_num_seqs=SLOTS, crash_waiting=None,
                             host_mem_limit_mb=None)


def test_gate_keeps_the_servers_queue_small_where_no_gate_floods_it() -> None:
    burst = Workload(BURST_PAGES, group_pages=40)
    with_gate = run_virtual(SERVER, gate(SCALED_GATE), burst, budget_s=300)
    without = run_virtual(SERVER, fixed(1600), burst, budget_s=300)  # olmOCR's global cap

    print(f"\n[gate-sim] {BURST_PAGES} pages, {SLOTS} slots: peak waiting with gate "
          f"{with_gate.peak_waiting} (bound {WAITING_BOUND}), without {without.peak_waiting}; "
          f"{with_gate.elapsed_s:.2f} s vs {without.elapsed_s:.2f} s; "
          f"releases {with_gate.snapshot['releases']}, pauses {with_gate.snapshot['pauses']}")
    assert with_gate.pages_done == without.pages_done == BURST_PAGES
    assert max(row[2] for row in with_gate.trace) == SLOTS  # the gate kept the slots busy
    assert with_gate.peak_waiting <= WAITING_BOUND
    assert without.peak_waiting > 10 * WAITING_BOUND
    assert with_gate.snapshot["releases"] >= 2
    assert with_gate.snapshot["pauses"] == 0
    assert with_gate.elapsed_s <= 1.05 * without.elapsed_s  # and lost no throughput doing it
