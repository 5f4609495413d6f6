"""The policy's rates part: the drain, the mean latency and the service rate."""

from __future__ import annotations

import math

import pytest

from pagegate.admission.policy import GateConfig, GateTuning
from pagegate.admission.policy.rates import (
    Rates,
    add_latency,
    drain_rate,
    mean_latency,
    measured_drain,
    pace_drain,
    sample_drain,
    service_rate,
)

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
    start = Rates(drain_num=6.0, drain_den=10.0, drain_at=0.0, drain_completed=completed_before)
    after = sample_drain(start, dt, completed, in_flight, CFG)
    assert (after.drain_at, after.drain_completed) == (dt, completed)
    if counted:
        decay = math.exp(-dt / 60.0)
        assert after.drain_num == pytest.approx(6.0 * decay + completed - completed_before)
        assert after.drain_den == pytest.approx(10.0 * decay + dt)
    else:
        assert (after.drain_num, after.drain_den) == (6.0, 10.0)


def test_the_first_sample_only_starts_the_clock() -> None:
    assert sample_drain(Rates(), 4.0, 7, 3, CFG) == Rates(drain_at=4.0, drain_completed=7)


@pytest.mark.parametrize(
    ("busy", "tuning", "trusted"),
    [(29.0, GateTuning(), False), (30.0, GateTuning(), True),
     (10.0, GateTuning(drain_trust_share=0.1), True), (5.0, GateTuning(drain_trust_share=0.1), False)],
)
def test_the_drain_is_trusted_for_sizing_after_a_share_of_the_window(
    busy: float, tuning: GateTuning, trusted: bool
) -> None:
    rates = Rates(drain_num=3.0 * busy, drain_den=busy)
    config = GateConfig(tuning=tuning)
    assert drain_rate(rates, config) == (pytest.approx(3.0) if trusted else None)
    assert measured_drain(rates) == pytest.approx(3.0)  # pacing takes it at once
    assert measured_drain(Rates()) == 0.0


def test_pacing_follows_the_last_polls_drain_in_a_ramp() -> None:
    """Completions doubling every 5 s: the window's mean trails far behind, the last
    poll's drain does not, and pacing takes the larger."""
    rates, done = sample_drain(Rates(), 0.0, 1, 1, CFG), 1
    for t in range(1, 31):
        done += round(2 ** (t / 5))
        rates = sample_drain(rates, float(t), done, 100, CFG)
    now = 2 ** (30 / 5)                                  # 64 pages/s in the last second
    assert measured_drain(rates) < 0.4 * now
    assert pace_drain(rates) == pytest.approx(now, rel=0.2)
    assert pace_drain(Rates(drain_num=30.0, drain_den=10.0)) == pytest.approx(3.0)  # never below
    assert pace_drain(Rates()) == 0.0


def test_latency_is_a_decayed_mean_over_the_drain_window() -> None:
    assert mean_latency(Rates()) is None
    rates = add_latency(Rates(), 10.0, 0.0, CFG)
    rates = add_latency(rates, 30.0, 0.0, CFG)
    assert mean_latency(rates) == pytest.approx(20.0)
    rates = add_latency(rates, 5.0, 60.0, CFG)  # one window later the old two weigh e^-1
    w = math.exp(-1.0)
    assert mean_latency(rates) == pytest.approx((w * 40.0 + 5.0) / (w * 2 + 1))
    assert mean_latency(add_latency(Rates(), -1.0, 0.0, CFG)) == 0.0  # a clock that ran back


@pytest.mark.parametrize(
    ("drain", "latency", "in_flight", "expected"),
    [
        (None, None, 10, None),      # nothing completed
        (2.0, None, 10, 2.0),
        (None, 50.0, 100, 2.0),      # Little: 100 in flight / 50 s
        (1.0, 50.0, 100, 2.0),       # the larger estimate wins
        (3.0, 50.0, 100, 3.0),
        (None, 0.0, 1, 1000.0),      # a clock that did not move: the latency floor, 1 ms
    ],
)
def test_service_rate_is_the_larger_of_drain_and_littles_law(
    drain: float | None, latency: float | None, in_flight: int, expected: float | None
) -> None:
    rates = Rates()
    if drain is not None:
        rates = Rates(drain_num=drain * 60.0, drain_den=60.0)
    if latency is not None:
        rates = add_latency(rates, latency, 0.0, CFG)
    result = service_rate(rates, in_flight, CFG)
    assert result == (None if expected is None else pytest.approx(expected))
