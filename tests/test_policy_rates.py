"""The policy's rates part: the drain, the mean latency and the service rate."""

from __future__ import annotations

import math

import pytest

from pagegate.admission.policy import GateConfig, GateTuning
from pagegate.admission.policy._signals import Rates, Ratio

CFG = GateConfig()


@pytest.mark.parametrize(
    ("completed_before", "completed", "in_flight", "dt", "counted"),
    [
        (0, 0, 10, 5.0, False),    # no completion yet: latency is not a slow server
        (0, 3, 10, 5.0, True),
        (3, 3, 10, 5.0, True),     # busy without a completion: busy time counts
        (3, 3, 0, 5.0, False),     # idle: left out
        (3, 5, 0, 5.0, True),      # the last pages finished
        (3, 5, 10, 0.0, False),    # no time passed
    ],
)
def test_the_drain_counts_busy_time_from_the_first_completion(
    completed_before: int, completed: int, in_flight: int, dt: float, counted: bool
) -> None:
    start = Rates(drain=Ratio(6.0, 10.0), drain_at=0.0, drain_completed=completed_before)
    after = start.sample(dt, completed, in_flight, CFG)
    assert (after.drain_at, after.drain_completed) == (dt, completed)
    if counted:
        decay = math.exp(-dt / 60.0)
        assert after.drain.num == pytest.approx(6.0 * decay + completed - completed_before)
        assert after.drain.den == pytest.approx(10.0 * decay + dt)
    else:
        assert after.drain == Ratio(6.0, 10.0)


def test_the_first_sample_only_starts_the_clock() -> None:
    assert Rates().sample(4.0, 7, 3, CFG) == Rates(drain_at=4.0, drain_completed=7)


def test_the_drain_is_completions_per_busy_second() -> None:
    assert Rates(drain=Ratio(30.0, 10.0)).drain_rate() == pytest.approx(3.0)
    assert Rates().drain_rate() == 0.0


def test_pacing_follows_the_last_polls_drain_in_a_ramp() -> None:
    """Completions doubling every 5 s: the window's mean trails far behind, the last
    poll's drain does not, and pacing takes the larger."""
    rates, done = Rates().sample(0.0, 1, 1, CFG), 1
    for t in range(1, 31):
        done += round(2 ** (t / 5))
        rates = rates.sample(float(t), done, 100, CFG)
    now = 2 ** (30 / 5)                                  # 64 pages/s in the last second
    assert rates.drain_rate() < 0.4 * now
    unpaced = GateConfig(tuning=GateTuning(pace_min_rate=1e-9, pace_gain=1.0))
    assert 0.7 * now < rates.pace(unpaced) <= now          # three polls' weight: ~3/4 of it
    assert Rates(drain=Ratio(30.0, 10.0)).pace(unpaced) == pytest.approx(3.0)  # never below


def test_latency_is_a_decayed_mean_over_the_drain_window() -> None:
    assert Rates().latency.value() is None
    rates = Rates().add_latency(10.0, 0.0, CFG)
    rates = rates.add_latency(30.0, 0.0, CFG)
    assert rates.latency.value() == pytest.approx(20.0)
    rates = rates.add_latency(5.0, 60.0, CFG)  # one window later the old two weigh e^-1
    w = math.exp(-1.0)
    assert rates.latency.value() == pytest.approx((w * 40.0 + 5.0) / (w * 2 + 1))
    assert Rates().add_latency(-1.0, 0.0, CFG).latency.value() == 0.0  # a clock that ran back
