"""The gate under every fault schedule (pagegate.sim.faults), in virtual time.

The production page path (the `Gate`, `PageOcr`, `PageClient`) runs against the simulated
rtx4090 with 600 pages, once without a fault and once per schedule in `SCHEDULES`. Virtual
time is exact and repeatable, so the assertions are on figures. `pytest -s` prints each
schedule's figures.

The measures (issue 30, item 5):
- the yardstick rate: the best FixedLimit(n) closed loop on the same profile and pages,
  n swept around the 65 pages whose KV fits the cache (163,840 tokens / ~2,500 a page);
  each run's rate is its steady one, the middle half of its pages over the time they took
  (the start's ramp and the end's drain are the same whatever happens mid-run);
- the page latency L: the median time a page spends in flight in the fault-free gate run;
- recovery: the first time t after the fault ends at which the completion rate over the
  window [t - L, t), entirely after the fault, reaches 0.95 of the yardstick; reported as
  t - end, so L is the least it can be. The target is 2 L.

A target the gate misses is an xfail(strict=True) with the measured figure in its reason,
not a weaker assertion.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest

from pagegate.admission import Gate, GateConfig
from pagegate.admission.base import FixedLimit
from pagegate.admission.metrics import MetricsPoller
from pagegate.sim.faults import SCHEDULES, Schedule
from pagegate.sim.measure import steady_rate
from pagegate.sim.profiles import get_server_profile
from pagegate.sim.virtual import Opened, Run, Site, Strategy, Workload, run_virtual

PROFILE = get_server_profile("rtx4090")
PAGES = Workload(600)
BUDGET_S = 20_000.0
FIXED_SWEEP = (62, 64, 66, 68)
"""Around the KV-fitting 65 pages: 66 is the best (1.253 pages/s); 68 already preempts."""
SHARE = 0.95
CALM_STALLS = ("calm-stall-12s", "calm-stall-10min")


@asynccontextmanager
async def gate(site: Site) -> AsyncIterator[Opened]:
    cfg = GateConfig()
    poller = MetricsPoller(site.metrics_url, timeout_seconds=cfg.scrape_timeout_seconds,
                           clock=site.clock, client=site.http)
    async with Gate(cfg, poller, site.clock) as g:
        yield Opened(g, limit=lambda: g.state.concurrency.limit)


def fixed(n: int) -> Strategy:
    @asynccontextmanager
    async def strategy(_: Site) -> AsyncIterator[Opened]:
        yield Opened(FixedLimit(n), limit=lambda: float(n))
    return strategy


# --- the measures: pure functions of a run's completion times ---------------------------


def window_rate(done_at: Sequence[float], start: float, end: float) -> float:
    """Pages done in [start, end) per second; `done_at` sorted."""
    count = bisect.bisect_left(done_at, end) - bisect.bisect_left(done_at, start)
    return count / (end - start)


def recovery_s(done_at: Sequence[float], ends: float, window: float, target: float,
               horizon: float) -> float | None:
    """Seconds from `ends` to the first whole second t at which the rate over [t - window, t),
    after `ends`, is at least `target`; None if not by `ends + horizon`."""
    done = sorted(done_at)
    k = 0
    while (t := ends + window + k) <= ends + horizon:
        if window_rate(done, t - window, t) >= target:
            return t - ends
        k += 1
    return None


def test_the_measures_on_a_hand_made_trace() -> None:
    # One page a second from 0 to 99, none from 100 to 129, then two a second.
    done = [float(t) for t in range(100)] + [130 + i / 2 for i in range(100)]
    assert steady_rate(done) == pytest.approx(100 / 105)  # page 50 at 50 s, 150 at 155 s
    assert window_rate(done, 90, 100) == 1.0
    assert window_rate(done, 100, 130) == 0.0
    assert recovery_s(done, 130.0, 10.0, 2.0, 100.0) == 10.0
    assert recovery_s(done, 100.0, 10.0, 1.0, 100.0) == 35.0  # [125, 135): 10 pages
    assert recovery_s(done, 100.0, 10.0, 3.0, 100.0) is None


# --- the runs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Baseline:
    run: Run
    yardstick: float
    """Pages/s: the best FixedLimit(n)'s steady rate."""
    best_n: int
    latency: float
    """L: the median time in flight of a page in the fault-free gate run."""


@dataclass(frozen=True)
class Figures:
    name: str
    run: Run
    limit_at_start: float | None
    """The gate's C in the last trace sample before the fault began."""
    admitted_during: int | None
    """Slots granted while the fault lasted."""
    recovery: float | None


@pytest.fixture(scope="module")
def baseline() -> Baseline:
    run = run_virtual(PROFILE, gate, PAGES, strategy_name="gate", budget_s=BUDGET_S)
    rates = {n: steady_rate(run_virtual(PROFILE, fixed(n), PAGES, budget_s=BUDGET_S).done_at)
             for n in FIXED_SWEEP}
    best_n = max(rates, key=rates.__getitem__)
    base = Baseline(run, rates[best_n], best_n, statistics.median(run.latencies))
    print(f"\nfault-free gate: {run.pages_done} pages in {run.elapsed_s:.1f} s, steady "
          f"{steady_rate(run.done_at):.3f} pages/s; yardstick FixedLimit({best_n}) "
          f"{base.yardstick:.3f} pages/s (sweep {', '.join(f'{n}: {r:.3f}' for n, r in rates.items())}); "
          f"page latency L = {base.latency:.1f} s")
    return base


_figures: dict[str, Figures] = {}


def figures(name: str, base: Baseline) -> Figures:
    """Run schedule `name` once (cached for the module) and print its figures."""
    if name in _figures:
        return _figures[name]
    schedule: Schedule = SCHEDULES[name]
    run = run_virtual(PROFILE, gate, schedule.workload or PAGES, strategy_name=name,
                      budget_s=BUDGET_S, faults=schedule.faults)
    limit = admitted = recovery = None
    line = (f"{name}: {run.end}, {run.pages_done} pages in {run.elapsed_s:.1f} s "
            f"({run.pages_per_s:.3f} pages/s), peak waiting {run.peak_waiting}, "
            f"preemptions {run.preemptions}, capacity retries {run.capacity_retries}, "
            f"gate pauses {run.snapshot.get('pauses')}")
    if schedule.begins_s is not None and schedule.ends_s is not None:
        begins, ends = schedule.begins_s, schedule.ends_s
        limit = [row[5] for row in run.trace if row[0] <= begins][-1]
        admitted = sum(begins <= t < ends for t in run.admitted_at)
        # The window must end before the final drain (the last L), whose rate flatters.
        assert run.elapsed_s > ends + 3 * base.latency, "too few pages to see the recovery"
        recovery = recovery_s(run.done_at, ends, base.latency, SHARE * base.yardstick,
                              horizon=run.elapsed_s - base.latency - ends)
        line += (f"; fault {begins:g}-{ends:g} s: C {limit} at its start, {admitted} "
                 f"admitted during it; recovery "
                 + ("never" if recovery is None else f"{recovery:.1f} s")
                 + f" (target {2 * base.latency:.1f} s)")
    else:
        line += f"; steady {steady_rate(run.done_at):.3f} pages/s"
    print("\n" + line)
    _figures[name] = Figures(name, run, limit, admitted, recovery)
    return _figures[name]


# --- the targets ---------------------------------------------------------------------------


def test_the_fault_free_gate_runs_at_the_yardstick_rate(baseline: Baseline) -> None:
    """The measure itself: without a fault the gate is at the yardstick's rate."""
    assert baseline.run.end == "finished"
    assert steady_rate(baseline.run.done_at) >= SHARE * baseline.yardstick


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_no_schedule_crashes_the_engine(name: str, baseline: Baseline) -> None:
    run = figures(name, baseline).run
    assert run.end != "crashed", run.crash_reason
    assert run.end == "finished"
    assert run.pages_done == run.pages


def _nothing_done_during(run: Run, schedule: Schedule, _: Baseline) -> bool:
    assert schedule.begins_s is not None and schedule.ends_s is not None
    return not [t for t in run.done_at if schedule.begins_s < t < schedule.ends_s]


MARKS: dict[str, Callable[[Run, Schedule, Baseline], bool]] = {
    "calm-stall-12s": _nothing_done_during,
    "calm-stall-10min": _nothing_done_during,
    "crash-restart": _nothing_done_during,
    "metrics-failing-1min": lambda run, *_: "HTTP 500" in str(run.snapshot["last_scrape_error"]),
    "queue-cap-503s": lambda run, *_: run.capacity_retries > 0,
    "front-end-stall": lambda run, _, base: run.peak_waiting > base.run.peak_waiting,
}
"""What each fault leaves in a run, to show it happened (a 2 s /metrics leaves nothing a
`Run` shows: the gate rides it out)."""


@pytest.mark.parametrize("name", list(MARKS))
def test_each_fault_leaves_its_mark(name: str, baseline: Baseline) -> None:
    """Engine stalled or down: not one page done; /metrics failing: the gate saw the 500s;
    503s: pages backed off; a stalled front end: the bodies it held land at once."""
    assert MARKS[name](figures(name, baseline).run, SCHEDULES[name], baseline)


@pytest.mark.parametrize("name", CALM_STALLS)
def test_a_calm_stall_admits_at_most_the_limit_it_began_with(
    name: str, baseline: Baseline
) -> None:
    f = figures(name, baseline)
    assert f.limit_at_start is not None and f.admitted_during is not None
    assert f.admitted_during <= f.limit_at_start


@pytest.mark.parametrize("name", [name for name, s in SCHEDULES.items() if s.ends_s is not None])
def test_the_gate_is_back_at_the_yardstick_rate_within_two_page_latencies(
    name: str, baseline: Baseline
) -> None:
    f = figures(name, baseline)
    assert f.recovery is not None and f.recovery <= 2 * baseline.latency, (
        f"{name}: recovery {f.recovery} s, target {2 * baseline.latency:.1f} s")
