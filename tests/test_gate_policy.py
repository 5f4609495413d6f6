"""The pure admission policy: one number table per rule, then hypothesis interleavings."""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pagegate.admission.base import Outcome
from pagegate.admission.policy import (
    Finished,
    GateConfig,
    GateState,
    GateTuning,
    Joined,
    Left,
    Reason,
    ReleaseDecision,
    Scraped,
    Tick,
    initial_state,
    step,
)
from pagegate.admission.policy._signals import Ratio
from pagegate.admission.policy._step import fold
from pagegate.server.metrics import Reading

CFG = GateConfig(initial_concurrency=16)
"""The tables below start C at 16 (the default start is 4: docs/admission.md)."""
PARTS = ("signals", "concurrency", "bucket", "rates", "units", "front")


# The table tests drive the step's parts one at a time, under the names of what they do.


def observe(state: GateState, r: Reading, config: GateConfig, *,
            in_flight_at_scrape: int = 0, sent_at_scrape: int = 0) -> GateState:
    return fold(state, Scraped(r, in_flight_at_scrape, sent_at_scrape), r.at, config)


def observe_failure(state: GateState, at: float, config: GateConfig) -> GateState:
    return fold(state, Tick(), at, config)  # the runtime steps a failed scrape as a Tick


def add_waiter(state: GateState) -> GateState:
    return fold(state, Joined(), 0.0, CFG)


def remove_waiter(state: GateState) -> GateState:
    return fold(state, Left(), 0.0, CFG)


def apply_release(state: GateState, decision: ReleaseDecision, now: float, config: GateConfig
                  ) -> GateState:
    assert decision.release
    return dataclasses.replace(state, units=state.units.grant(decision.pages, now))


def dispatch(state: GateState, now: float, config: GateConfig) -> tuple[GateState, int]:
    assert state.page_allowance(now, config) >= 1
    return state.dispatch(now, config)


def on_outcome(state: GateState, outcome: Outcome, unit_id: int, now: float, config: GateConfig,
               *, dispatched_at: float | None = None) -> GateState:
    return fold(state, Finished(outcome, unit_id, dispatched_at), now, config)


def next_wake_at(state: GateState, decision: ReleaseDecision, now: float, config: GateConfig
                 ) -> float | None:
    return state.next_wake_at(decision, now, config)


def unavailable(state: GateState, now: float, config: GateConfig) -> bool:
    return state.pause_reason(now, config) is not None and state.unavailable(now, config)


def pace_rate(state: GateState, config: GateConfig) -> float:
    return state.rates.pace(config)


def next_token_at(state: GateState, now: float, config: GateConfig) -> float:
    return state.bucket.next_token_at(now, pace_rate(state, config), config)


def replace(state: GateState, **values: Any) -> GateState:
    """dataclasses.replace for a GateState, naming the parts' fields as if they were its
    own (limit=, credits=, drain=...): each value goes to the part that holds it."""
    changes: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        if name in {f.name for f in dataclasses.fields(GateState)}:
            changes[name] = value
            continue
        part = next(p for p in PARTS if name in {f.name for f in dataclasses.fields(getattr(state, p))})
        parts.setdefault(part, {})[name] = value
    for part, fields in parts.items():
        changes[part] = dataclasses.replace(getattr(state, part), **fields)
    return dataclasses.replace(state, **changes)


def gate_config(**values: Any) -> GateConfig:
    """A GateConfig from flat settings: GateTuning's names go to its tuning."""
    tuned = {k: v for k, v in values.items() if k in GateTuning._fields}
    user = {k: v for k, v in values.items() if k not in tuned}
    return GateConfig(**user, tuning=GateTuning(**tuned))


def reading(
    at: float,
    *,
    waiting: int = 0,
    running: int = 0,
    kv: float = 0.0,
    preemptions: float | None = None,
    generated: float | None = None,
    healthy: bool = True,
) -> Reading:
    return Reading(
        waiting=waiting,
        running=running,
        kv_usage=kv,
        at=at,
        preemptions_total=preemptions,
        generation_tokens_total=generated,
        healthy=healthy,
    )


def with_waiters(state: GateState, n: int) -> GateState:
    for _ in range(n):
        state = add_waiter(state)
    return state


def released(state: GateState, now: float, config: GateConfig = CFG) -> GateState:
    decision = state.decide_release(now, config)
    assert decision.release, decision
    return apply_release(state, decision, now, config)


def send(state: GateState, n: int, now: float, config: GateConfig = CFG) -> tuple[GateState, list[int]]:
    units = []
    for _ in range(n):
        state, unit = dispatch(state, now, config)
        units.append(unit)
    return state, units


# ------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "overrides",
    [
        {"peak_ratio": -0.1},
        {"peak_ratio": 1.5},
        {"cooldown_seconds": -1},
        {"max_in_flight_pages": 0},
        {"kv_cache_ceiling": 0.0},
        {"kv_cache_ceiling": 1.2},
        {"poll_interval_seconds": 0},
        {"stale_after_seconds": 1.0},  # not above the poll interval
        {"initial_concurrency": 0},
        {"unavailable_after_seconds": 0.0},
    ],
)
def test_config_rejects_inconsistent_values(overrides: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="invalid GateConfig"):
        gate_config(**overrides)


def test_config_defaults_are_olmocrs_rules() -> None:
    assert (CFG.peak_ratio, CFG.cooldown_seconds, CFG.require_progress) == (0.1, 30.0, True)
    assert CFG.max_in_flight_pages == 1600


def test_small_cap_clamps_the_concurrency_limit() -> None:
    config = GateConfig(max_in_flight_pages=3)
    state = initial_state(0.0, config)
    assert state.concurrency.limit == 3
    assert config.concurrency_start == 3


# ------------------------------------------------------------------------- rule 2: peak ratio


@pytest.mark.parametrize(
    ("peak_running", "waiting", "releases"),
    [
        (0, 0, True),      # a fresh, idle server: the first release is immediate
        (0, 1, False),     # nothing demonstrated yet and something waits: hold
        (4, 0, True),
        (4, 1, False),     # 0.1 x 4 = 0.4
        (100, 10, True),   # at the threshold
        (100, 11, False),  # above it
        (256, 25, True),
        (256, 26, False),
    ],
)
def test_peak_ratio_rule(peak_running: int, waiting: int, releases: bool) -> None:
    state = observe(initial_state(0.0, CFG), reading(0.0, running=peak_running), CFG)
    state = observe(with_waiters(state, 1), reading(1.0, running=peak_running, waiting=waiting), CFG)
    decision = state.decide_release(1.0, CFG)
    assert decision.release is releases
    if not releases:
        assert decision.reason is Reason.PEAK_RATIO


def test_peak_is_the_running_maximum_not_waiting() -> None:
    state = observe(initial_state(0.0, CFG), reading(0.0, running=10, waiting=500), CFG)
    assert state.signals.peak == 10


@pytest.mark.parametrize(
    ("elapsed", "expected_peak"),
    [(0.0, 1000.0), (600.0, 500.0), (1200.0, 250.0), (1800.0, 125.0), (6000.0, 1000 / 1024)],
)
def test_peak_decays_with_its_half_life(elapsed: float, expected_peak: float) -> None:
    state = observe(initial_state(0.0, CFG), reading(0.0, running=1000), CFG)
    state = observe(state, reading(elapsed, running=0), CFG)
    assert state.signals.peak == pytest.approx(expected_peak)


def test_decayed_peak_never_drops_below_current_running() -> None:
    state = observe(initial_state(0.0, CFG), reading(0.0, running=1000), CFG)
    state = observe(state, reading(6000.0, running=64), CFG)
    assert state.signals.peak == 64


def test_an_early_spike_stops_setting_the_threshold_after_it_decays() -> None:
    """A spike of 1000 running lets 100 waiting through at first; an hour later it does not."""
    state = observe(initial_state(0.0, CFG), reading(0.0, running=1000), CFG)
    state = with_waiters(state, 1)
    early = observe(state, reading(1.0, running=40, waiting=60), CFG)
    assert early.decide_release(1.0, CFG).release
    late = state
    for t in range(60, 3601, 60):
        late = observe(late, reading(float(t), running=40, waiting=60), CFG)
    assert late.signals.peak == pytest.approx(40.0, abs=20.0)
    assert late.decide_release(3600.0, CFG).reason is Reason.PEAK_RATIO


# ------------------------------------------------------------------------- rule 3: cooldown


def _after_first_release(config: GateConfig = CFG) -> GateState:
    state = observe(initial_state(0.0, config), reading(0.0), config)
    state = released(with_waiters(state, 1000), 0.0, config)
    state, units = send(state, state.page_allowance(0.0, config), 0.0, config)
    state = on_outcome(state, Outcome.OK, units[0], 0.5, config)
    # Use up the unit's credits so that a refill is wanted.
    return replace(state, credits=())


@pytest.mark.parametrize(
    ("now", "releases"),
    [(0.0, False), (1.0, False), (29.9, False), (30.0, True), (31.0, True), (300.0, True)],
)
def test_cooldown_rule(now: float, releases: bool) -> None:
    state = _after_first_release()
    state = observe(state, reading(now), CFG)
    decision = state.decide_release(now, CFG)
    assert decision.release is releases
    if not releases:
        assert decision.reason is Reason.COOLDOWN
        assert decision.recheck_at == 30.0


def test_first_release_happens_at_once_when_ready_and_idle() -> None:
    state = with_waiters(initial_state(100.0, CFG), 3)
    assert state.decide_release(100.0, CFG).reason is Reason.NO_READING
    state = observe(state, reading(100.0), CFG)
    decision = state.decide_release(100.0, CFG)
    assert decision.release and decision.pages == CFG.unit_pages


def test_a_decision_releases_at_most_one_unit_and_the_next_one_waits() -> None:
    state = observe(with_waiters(initial_state(0.0, CFG), 10_000), reading(0.0), CFG)
    decision = state.decide_release(0.0, CFG)
    state = apply_release(state, decision, 0.0, CFG)
    assert state.units.open_credits == decision.pages
    assert state.units.units_released == 1
    again = replace(state, credits=()).decide_release(0.0, CFG)
    assert not again.release and again.reason is Reason.COOLDOWN


# ------------------------------------------------------------------------- rule 4: progress


def _second_unit_wanted() -> tuple[GateState, list[int]]:
    state = observe(initial_state(0.0, CFG), reading(0.0), CFG)
    state = released(with_waiters(state, 1000), 0.0, CFG)
    state, units = send(state, 5, 0.0, CFG)
    state = replace(state, credits=())
    return observe(state, reading(40.0), CFG), units


def test_progress_rule_holds_until_a_page_of_the_last_unit_completes() -> None:
    state, units = _second_unit_wanted()
    assert state.decide_release(40.0, CFG).reason is Reason.PROGRESS
    state = on_outcome(state, Outcome.OK, units[0], 40.0, CFG)
    assert state.decide_release(40.0, CFG).release


@pytest.mark.parametrize(
    ("outcome", "counts"),
    [
        (Outcome.OK, True),
        (Outcome.CONTENT, True),  # the server finished it: an unusable answer is still progress
        (Outcome.CAPACITY, False),
        (Outcome.CANCELLED, False),
    ],
)
def test_which_outcomes_count_as_progress(outcome: Outcome, counts: bool) -> None:
    state, units = _second_unit_wanted()
    state = on_outcome(state, outcome, units[0], 40.0, CFG)
    state = replace(state, credits=())  # keep the refill wanted whatever came back
    assert state.decide_release(40.0, CFG).release is counts


def test_a_completion_from_an_older_unit_is_not_progress_of_the_newest() -> None:
    state, units_of_first = _second_unit_wanted()
    state = on_outcome(state, Outcome.OK, units_of_first[0], 40.0, CFG)
    state = released(state, 40.0)  # unit 2
    state = replace(state, credits=())
    state = on_outcome(state, Outcome.OK, units_of_first[1], 80.0, CFG)  # unit 1 again
    state = observe(state, reading(80.0), CFG)
    assert state.decide_release(80.0, CFG).reason is Reason.PROGRESS


def test_progress_rule_can_be_switched_off() -> None:
    config = GateConfig(require_progress=False)
    state = observe(initial_state(0.0, config), reading(0.0), config)
    state = released(with_waiters(state, 1000), 0.0, config)
    state = observe(replace(state, credits=()), reading(40.0), config)
    assert state.decide_release(40.0, config).release


# ------------------------------------------------------------------------- freshness


def test_no_release_without_a_reading_and_a_failed_scrape_is_no_zero_reading() -> None:
    """A failed scrape leaves the newest good reading as it was: the queue it showed still
    holds releases, and a calm one still allows them until it goes stale."""
    state = with_waiters(initial_state(0.0, CFG), 5)
    assert state.decide_release(0.0, CFG).reason is Reason.NO_READING
    busy = observe_failure(observe(state, reading(0.0, running=10, waiting=5), CFG), 0.5, CFG)
    assert busy.decide_release(0.5, CFG).reason is Reason.PEAK_RATIO
    calm = observe_failure(observe(state, reading(0.0), CFG), 0.5, CFG)
    assert calm.decide_release(0.5, CFG).release
    assert calm.decide_release(5.01, CFG).reason is Reason.STALE


@pytest.mark.parametrize(("age", "fresh"), [(0.0, True), (4.9, True), (5.0, True), (5.01, False)])
def test_stale_reading_freezes_releases_and_pages(age: float, fresh: bool) -> None:
    state = observe(with_waiters(initial_state(0.0, CFG), 5), reading(0.0), CFG)
    decision = state.decide_release(age, CFG)
    assert decision.release is fresh
    if not fresh:
        assert decision.reason is Reason.STALE
        assert state.pause_reason(age, CFG) is Reason.STALE
        state = apply_release(state, state.decide_release(0.0, CFG), 0.0, CFG)
        assert state.page_allowance(age, CFG) == 0


def test_one_failed_scrape_does_not_pause_pages() -> None:
    state = observe(with_waiters(initial_state(0.0, CFG), 5), reading(0.0), CFG)
    state = released(state, 0.0)
    state = observe_failure(state, 1.0, CFG)
    assert state.page_allowance(1.0, CFG) == 5


def _stale_with_pages_back(finished_at: float, back: int, healthy: bool = True) -> GateState:
    """Four pages in flight at a reading at 0 s (C 4), `back` of them finished at `finished_at`."""
    config = gate_config(initial_concurrency=4)
    state = observe(with_waiters(initial_state(0.0, config), 20), reading(0.0), config)
    state = released(state, 0.0, config)
    units_sent = []
    for _ in range(state.page_allowance(0.0, config)):
        state, unit = dispatch(state, 0.0, config)
        units_sent.append(unit)
    state = observe(state, reading(0.0, running=4, healthy=healthy), config)  # the newest reading
    assert state.in_flight == 4
    for unit in units_sent[:back]:
        state = on_outcome(state, Outcome.OK, unit, finished_at, config)
    return state


@pytest.mark.parametrize(("finished_at", "back", "now", "allowed"), [
    (5.5, 3, 6.0, 3),     # stale, three pages back lately: three replace them
    (5.5, 3, 10.49, 3),   # the last page back is 4.99 s old: still clocked
    (5.5, 3, 10.5, 0),    # 5 s without a page back: paused
    (5.5, 0, 6.0, 0),     # stale and nothing back: nothing goes
])
def test_a_stale_reading_lets_pages_replace_the_pages_back_and_no_more(
    finished_at: float, back: int, now: float, allowed: int
) -> None:
    config = gate_config(initial_concurrency=4)
    state = _stale_with_pages_back(finished_at, back)
    assert state.page_allowance(now, config) == allowed
    assert (state.pause_reason(now, config) is None) == (back > 0 and now - finished_at < 5.0)
    assert replace(state, credits=()).decide_release(now, config).reason is Reason.STALE
    assert state.clocked_total == 0  # the four pages went on a fresh reading
    for _ in range(allowed):
        state, _ = dispatch(state, now, config)
    assert state.in_flight <= 4  # never more than at the newest reading
    assert state.page_allowance(now, config) == 0
    assert state.clocked_total == allowed  # each page sent on the stale reading counted


def test_a_stale_reading_does_not_pause_until_pages_stop_coming_back() -> None:
    config = gate_config(initial_concurrency=4)
    state = _stale_with_pages_back(5.5, 1)
    state, _ = dispatch(state, 6.0, config)  # the one page back is replaced: nothing left
    decision = state.decide_release(6.0, config)
    assert next_wake_at(state, decision, 6.0, config) == 10.5  # when the pause would start
    assert state.pause_reason(10.5, config) is Reason.STALE


def test_a_stale_unhealthy_reading_pauses_even_with_pages_back() -> None:
    config = gate_config(initial_concurrency=4)
    state = _stale_with_pages_back(5.5, 3, healthy=False)
    assert state.pause_reason(6.0, config) is Reason.STALE
    assert state.page_allowance(6.0, config) == 0


def test_unhealthy_reading_pauses() -> None:
    state = observe(with_waiters(initial_state(0.0, CFG), 5), reading(0.0, healthy=False), CFG)
    assert state.decide_release(0.0, CFG).reason is Reason.UNHEALTHY
    assert state.pause_reason(0.0, CFG) is Reason.UNHEALTHY


@pytest.mark.parametrize(
    ("generated_later", "running", "stalled"),
    [
        (100.0, 5, True),    # work on the server, no token for 61 s: hung engine
        (101.0, 5, False),   # tokens moved
        (100.0, 0, False),   # idle server: nothing to generate
    ],
)
def test_stall_detection(generated_later: float, running: int, stalled: bool) -> None:
    state = observe(initial_state(0.0, CFG), reading(0.0, running=5, generated=100.0), CFG)
    for t in range(1, 62):
        state = observe(state, reading(float(t), running=running, generated=generated_later), CFG)
    assert (state.pause_reason(61.0, CFG) is Reason.STALLED) is stalled


@pytest.mark.parametrize(("paused_for", "fails"), [(899.0, False), (900.0, True)])
def test_unavailable_after_a_long_pause(paused_for: float, fails: bool) -> None:
    state = observe(initial_state(0.0, CFG), reading(0.0), CFG)
    assert unavailable(state, paused_for, CFG) is fails
    assert not unavailable(state, paused_for, GateConfig(unavailable_after_seconds=None))


def test_unavailable_counts_from_start_when_no_reading_ever_came() -> None:
    state = initial_state(10.0, CFG)
    assert not unavailable(state, 909.0, CFG)
    assert unavailable(state, 910.0, CFG)


# ------------------------------------------------------------------------- demand and credits


def test_no_release_without_uncredited_waiters() -> None:
    state = observe(initial_state(0.0, CFG), reading(0.0), CFG)
    assert state.decide_release(0.0, CFG).reason is Reason.NO_DEMAND
    state = released(with_waiters(state, 3), 0.0)
    state = observe(add_waiter(state), reading(31.0), CFG)  # 4 waiters, 256 credits
    assert state.decide_release(31.0, CFG).reason is Reason.NO_DEMAND


@pytest.mark.parametrize(
    ("left", "room", "releases"),
    [
        (1, 0, False),      # credits left and C is full: the unit is not used up
        (0, 0, True),       # used up: release
        (300, 299, False),  # the page level could use less than the credits left
        (300, 300, False),
        (300, 301, True),   # C has more room than the credits can fill: release now
    ],
)
def test_release_when_the_unit_is_used_up_or_the_page_level_has_more_room(
    left: int, room: int, releases: bool
) -> None:
    state = observe(initial_state(0.0, CFG), reading(0.0), CFG)
    state = released(with_waiters(state, 10_000), 0.0)
    assert state.units.open_credits == 1024
    state, units = send(state, 2, 0.0)
    state = on_outcome(state, Outcome.OK, units[0], 1.0, CFG)
    state = observe(state, reading(40.0, running=1, kv=0.95), CFG)  # KV pressure: C holds
    state = replace(state, credits=((1, left),) if left else (), limit=state.in_flight + room)
    decision = state.decide_release(40.0, CFG)
    assert decision.release is releases
    if not releases:
        assert decision.reason is Reason.CREDITS_LEFT


def test_credits_are_spent_oldest_unit_first_and_returned_to_their_unit() -> None:
    config = GateConfig(unit_pages=2, cooldown_seconds=0)
    state = observe(initial_state(0.0, config), reading(0.0), config)
    state = released(with_waiters(state, 10), 0.0, config)
    state, first = send(state, 2, 0.0, config)
    state = on_outcome(state, Outcome.OK, first[0], 0.0, config)
    state = released(state, 0.0, config)
    assert state.units.credits == ((2, 2),)
    state = on_outcome(state, Outcome.CAPACITY, first[1], 0.0, config)
    assert state.units.credits == ((1, 1), (2, 2))
    state, units = send(state, 2, 0.0, config)
    assert units == [1, 2]


@pytest.mark.parametrize(
    ("outcome", "credit_back"),
    [(Outcome.OK, 0), (Outcome.CONTENT, 0), (Outcome.CAPACITY, 1), (Outcome.CANCELLED, 1)],
)
def test_pages_the_server_did_not_finish_return_their_credit(outcome: Outcome, credit_back: int) -> None:
    state = observe(initial_state(0.0, CFG), reading(0.0), CFG)
    state = released(with_waiters(state, 1), 0.0)
    state, units = send(state, 1, 0.0)
    before = state.units.open_credits
    state = on_outcome(state, outcome, units[0], 0.1, CFG)
    assert state.units.open_credits - before == credit_back
    assert state.in_flight == 0


def test_waiter_accounting_refuses_to_go_negative() -> None:
    with pytest.raises(ValueError):
        remove_waiter(initial_state(0.0, CFG))
    with pytest.raises(ValueError):
        on_outcome(initial_state(0.0, CFG), Outcome.OK, 1, 0.0, CFG)


# ------------------------------------------------------------------------- unit sizing


def _with_drain(rate: float, busy_seconds: float = 60.0) -> GateState:
    state = initial_state(0.0, CFG)
    return replace(state, drain=Ratio(rate * busy_seconds, busy_seconds))


@pytest.mark.parametrize(("drain", "pages"), [(None, 1024), (2.0, 1024), (4.5, 1024), (27.0, 1620)])
def test_a_unit_is_unit_pages_or_two_cooldowns_of_the_drain(drain: float | None, pages: int) -> None:
    state = initial_state(0.0, CFG) if drain is None else _with_drain(drain)
    assert state.unit_size(CFG) == pages
    state = observe(with_waiters(state, 10_000), reading(0.0), CFG)
    assert state.decide_release(0.0, CFG).pages == pages


def test_latency_is_a_decayed_mean_of_completed_pages() -> None:
    state = observe(initial_state(0.0, CFG), reading(0.0), CFG)
    state = released(with_waiters(state, 10), 0.0)
    state, units = send(state, 3, 0.0)
    assert state.rates.latency.value() is None
    state = on_outcome(state, Outcome.OK, units[0], 10.0, CFG, dispatched_at=0.0)
    state = on_outcome(state, Outcome.OK, units[1], 10.0, CFG, dispatched_at=-20.0)
    assert state.rates.latency.value() == pytest.approx(20.0)
    # A page the server did not finish says nothing about latency.
    state = on_outcome(state, Outcome.CAPACITY, units[2], 10.0, CFG, dispatched_at=-1000.0)
    assert state.rates.latency.value() == pytest.approx(20.0)
    # One drain window later, the old pages weigh e^-1 each against a new one of 5 s.
    state = replace(state, in_flight=1)
    state = on_outcome(state, Outcome.OK, units[0], 70.0, CFG, dispatched_at=65.0)
    w = math.exp(-1.0)
    assert state.rates.latency.value() == pytest.approx((w * 40.0 + 5.0) / (w * 2 + 1))


def test_pacing_follows_the_drain_from_the_first_completions() -> None:
    state = initial_state(0.0, CFG)
    assert pace_rate(state, CFG) == CFG.tuning.pace_min_rate  # nothing measured: the floor
    fast = replace(state, drain=Ratio(27.0, 1.0))  # one busy second, 27 pages
    assert fast.rates.drain_rate() == pytest.approx(27.0)
    assert pace_rate(fast, CFG) == pytest.approx(4 * 27.0)  # pacing follows it at once
    slow = replace(state, drain=Ratio(1.0, 1.0))
    assert pace_rate(slow, CFG) == CFG.tuning.pace_min_rate


def test_drain_rate_counts_busy_time_from_the_first_completion() -> None:
    state = observe(initial_state(0.0, CFG), reading(0.0), CFG)
    state = released(with_waiters(state, 1000), 0.0)
    state, _ = send(state, 10, 0.0)
    for second in range(1, 40):  # 39 s of latency, no completion: not counted as zero drain
        state = observe(state, reading(float(second)), CFG)
    assert state.rates.drain.den == 0.0
    t = 40.0
    for i in range(120):  # then 2 pages/s for 60 s
        t = 40.0 + i * 0.5
        state = on_outcome(state, Outcome.OK, 1, t, CFG)
        state = replace(state, in_flight=state.in_flight + 1)  # keep the server busy
        if i % 2 == 1:
            state = observe(state, reading(t), CFG)
    assert state.rates.drain_rate() == pytest.approx(2.0, rel=0.05)


# ------------------------------------------------------------------------- pacing: C


def _steady(
    limit: int, in_flight: int, *, peak: float = 0.0, slow_start: bool = True, acked: int = 10_000
) -> GateState:
    """A gate with C at `limit`, `in_flight` pages out, and `acked` pages back since the
    last reading (plenty by default, so that only the rule under test bounds growth)."""
    state = initial_state(0.0, CFG)
    return replace(
        state,
        limit=limit,
        in_flight=in_flight,
        peak=peak,
        slow_start=slow_start,
        acked=acked,
        estimated=True,
        reading=reading(0.0, running=int(peak)),
        running_seen=int(peak),
    )


@pytest.mark.parametrize(
    ("limit", "in_flight", "slow_start", "r", "expected"),
    [
        # slow start doubles while the queue is empty and the limit is used
        (16, 16, True, {"running": 16}, 32),
        (16, 7, True, {"running": 7}, 32),  # whether C is in use or not
        # slow start grows no further than the KV cache has room for
        (64, 64, True, {"running": 64, "kv": 0.8}, 72),  # 64 x (0.9 - 0.8) / 0.8 = 8
        # additive growth after the first cut: 5 %
        (100, 100, False, {"running": 100}, 105),
        # below the band (its floor 2: no drain measured yet): grow; at it: hold
        (100, 100, False, {"running": 100, "waiting": 1, "kv": 0.6}, 105),
        (100, 100, False, {"running": 100, "waiting": 2, "kv": 0.6}, 100),
        # above the band: cut half the excess off what is in flight, ceil(13 / 2) = 7
        (100, 100, False, {"running": 90, "waiting": 15}, 93),
        (120, 100, False, {"running": 90, "waiting": 15}, 93),
        # KV above the ceiling: no growth, and the queue target drops to zero
        (100, 100, False, {"running": 100, "kv": 0.95}, 100),
        (100, 100, False, {"running": 96, "waiting": 4, "kv": 0.95}, 98),
        # never below the floor (the start, 16), never above the cap
        (20, 20, False, {"running": 0, "waiting": 200}, 16),
        (1600, 1600, True, {"running": 1600}, 1600),
    ],
)
def test_concurrency_limit_steering(
    limit: int, in_flight: int, slow_start: bool, r: dict[str, float], expected: int
) -> None:
    state = _steady(limit, in_flight, peak=100.0, slow_start=slow_start)
    state = observe(state, reading(0.0, **r), CFG)  # type: ignore[arg-type]
    assert state.concurrency.limit == expected


def test_additive_growth_on_a_small_limit_is_one_page() -> None:
    config = GateConfig(initial_concurrency=4)
    state = _steady(10, 10, peak=12.0, slow_start=False)
    state = observe(state, reading(1.0, running=10), config)
    assert state.concurrency.limit == 11


def test_a_cut_ends_slow_start() -> None:
    state = _steady(100, 100, peak=100.0)
    state = observe(state, reading(1.0, running=90, waiting=30, kv=0.6), CFG)
    assert not state.concurrency.slow_start


@pytest.mark.parametrize(
    ("kv", "running_before", "running", "holds"),
    [
        (0.2, 0, 40, True),    # the batch grows and the cache has room: the engine takes it in
        (0.6, 40, 60, True),   # still growing since the last reading
        (0.2, 60, 60, False),  # the batch stopped growing: slots bind, cut
        (0.95, 0, 60, False),  # the cache is past its ceiling: cut
    ],
)
def test_a_queue_the_engine_takes_in_holds_C(
    kv: float, running_before: int, running: int, holds: bool
) -> None:
    state = replace(_steady(100, 100, peak=float(running_before)), running_seen=running_before)
    state = observe(state, reading(1.0, running=running, waiting=30, kv=kv), CFG)
    assert (state.concurrency.limit == 100) is holds
    assert state.concurrency.slow_start is holds  # a cut ends slow start
    assert state.concurrency.running_seen == running


def test_repeated_readings_of_one_overload_do_not_compound_the_cut() -> None:
    state = _steady(100, 100, peak=100.0, slow_start=False)
    for _ in range(20):  # same instant: the peak (100) does not decay between readings
        state = observe(state, reading(0.0, running=90, waiting=15), CFG)
    assert state.concurrency.limit == 93


def test_preemptions_cut_the_limit_multiplicatively() -> None:
    state = _steady(100, 100, peak=100.0, slow_start=False)
    state = observe(state, reading(1.0, running=100, preemptions=7.0), CFG)
    # first sight of the counter is a baseline: room, so growth
    assert state.concurrency.limit == 105
    state = observe(replace(state, acked=50), reading(2.0, running=100, preemptions=9.0), CFG)
    assert state.concurrency.limit == 90  # 0.9 x the 100 in flight
    state = observe(replace(state, acked=50), reading(3.0, running=100, preemptions=9.0), CFG)
    assert state.concurrency.limit == 95  # no new preemption: additive growth resumes


def test_a_preemption_counter_reset_is_not_a_signal() -> None:
    state = _steady(100, 100, peak=100.0, slow_start=False)
    state = observe(state, reading(1.0, running=100, preemptions=50.0), CFG)
    grown = state.concurrency.limit
    state = replace(state, acked=50)  # pages came back meanwhile
    state = observe(state, reading(2.0, running=100, preemptions=0.0), CFG)  # server restarted
    assert state.concurrency.limit > grown


def _front_learned(latency_s: float, drain: float) -> GateState:
    """A gate whose front end has shown `latency_s` and whose pages drain at `drain`/s."""
    state = _steady(50, 0)
    state = replace(state, latencies=((1.0, latency_s),), at=1.0, sent_seen=100,
                    drain=Ratio(drain * 30.0, 30.0))
    return state


@pytest.mark.parametrize(
    ("in_flight", "running", "waiting", "queue"),
    [
        (10, 10, 0, 0.0),    # everything reached the engine
        (15, 10, 0, 0.0),    # 5 in the front end: 10 pages/s x 0.5 s, the pipeline itself
        (30, 10, 0, 15.0),   # 20 before the engine: 15 beyond the stage's 5 count as queue
        (30, 10, 5, 15.0),   # waiting 5 + gap (30 - 15 - 5 = 10)
        (5, 100, 3, 3.0),    # another tenant's requests: a negative gap is no signal
    ],
)
def test_the_front_ends_excess_over_rate_times_latency_counts_as_queue(
    in_flight: int, running: int, waiting: int, queue: float
) -> None:
    state = _front_learned(0.5, 10.0)
    state = observe(state, reading(1.5, running=running, waiting=waiting), CFG,
                    in_flight_at_scrape=in_flight, sent_at_scrape=105)
    assert state.signals.queue == queue


@pytest.mark.parametrize(("transit_s", "limit"), [(1.0, 20), (0.0, 16)])
def test_a_reading_holds_a_queue_the_refill_trip_needs(transit_s: float, limit: int) -> None:
    """16 pages/s, peak 20: the band's top is 16 x (1 s poll + transit), so 24 waiting is
    inside it with a 1 s trip through the front end and 4 over it without one."""
    state = replace(_steady(20, 20, peak=20.0, slow_start=False, acked=0),
                    held=Ratio(10.0 * transit_s, 10.0), drain=Ratio(16.0 * 30.0, 30.0))
    state = observe(state, reading(1.0, running=20, waiting=24, kv=0.5), CFG)
    assert state.concurrency.limit == limit


def test_without_a_rate_or_sends_the_front_end_is_no_signal() -> None:
    state = observe(_steady(50, 0), reading(1.0, running=0), CFG,
                    in_flight_at_scrape=40, sent_at_scrape=40)
    assert state.signals.queue == 0.0  # nothing completed yet: no rate, no tolerance
    state = observe(_front_learned(0.5, 10.0), reading(1.5, running=0), CFG)
    assert state.signals.queue == 0.0  # a holder that never calls sent(): no counts


@pytest.mark.parametrize(("peak", "drain", "band"), [
    (0.0, 0.0, 2.0),      # nothing measured: the floor
    (400.0, 0.0, 2.0),    # a peak alone does not widen it
    (20.0, 16.0, 16.0),   # what the engine takes in over a poll (no front-end transit yet)
    (4.0, 16.0, 16.0),    # whatever the peak
])
def test_waiting_band_is_the_refill_trip(peak: float, drain: float, band: float
                                                          ) -> None:
    state = replace(initial_state(0.0, CFG), peak=peak, drain=Ratio(drain * 30.0, 30.0))
    assert state.waiting_band(CFG) == band


# ------------------------------------------------------------------------- pacing: tokens, cap


def _open_gate(config: GateConfig, waiters: int) -> GateState:
    state = observe(initial_state(0.0, config), reading(0.0), config)
    return released(with_waiters(state, waiters), 0.0, config)


def test_token_bucket_spreads_a_unit_over_time() -> None:
    config = GateConfig(initial_concurrency=4, tuning=GateTuning(pace_min_rate=10.0))
    state = replace(_open_gate(config, 100), limit=200)
    assert state.page_allowance(0.0, config) == 10  # a full bucket: one second's worth
    state, _ = send(state, 10, 0.0, config)
    assert state.page_allowance(0.0, config) == 0
    assert next_token_at(state, 0.0, config) == pytest.approx(0.1)
    assert state.page_allowance(0.35, config) == 3


def test_a_short_poll_still_leaves_the_bucket_c_floor_tokens() -> None:
    """At 10 pages/s and a 0.1 s poll, one poll's worth is one token: a loop that wakes
    0.3 s late would lose two of three. The bucket keeps C's floor (4) instead."""
    config = GateConfig(initial_concurrency=4, poll_interval_seconds=0.1, stale_after_seconds=3.0,
                        tuning=GateTuning(pace_min_rate=10.0))
    state = replace(_open_gate(config, 100), limit=16)
    assert state.page_allowance(0.0, config) == config.concurrency_start == 4
    state, _ = send(state, 4, 0.0, config)
    assert state.page_allowance(0.3, config) == 3  # the late wake-up keeps its refill
    assert state.page_allowance(2.0, config) == 4  # and idle time does not pile up


@pytest.mark.parametrize(
    ("limit", "cap", "in_flight", "allowed"),
    [(16, 1600, 0, 10), (16, 1600, 12, 4), (16, 1600, 16, 0), (30, 20, 15, 5), (30, 20, 25, 0)],
)
def test_allowance_respects_limit_and_cap(limit: int, cap: int, in_flight: int, allowed: int) -> None:
    config = GateConfig(max_in_flight_pages=cap, initial_concurrency=1)
    state = replace(_open_gate(config, 100), limit=limit, in_flight=in_flight)
    assert state.page_allowance(0.0, config) == allowed


def test_next_wake_names_the_cooldown_end_and_the_next_token() -> None:
    state = observe(_after_first_release(), reading(10.0), CFG)
    decision = state.decide_release(10.0, CFG)
    assert decision.reason is Reason.COOLDOWN
    assert next_wake_at(state, decision, 10.0, CFG) == 30.0
    config = GateConfig(initial_concurrency=4, tuning=GateTuning(pace_min_rate=2.0))
    state = replace(_open_gate(config, 100), limit=16)
    state, _ = send(state, state.page_allowance(0.0, config), 0.0, config)
    assert next_wake_at(state, state.decide_release(0.0, config), 0.0, config) == pytest.approx(0.5)


def test_next_wake_is_the_unavailable_deadline_while_paused_with_waiters() -> None:
    state = with_waiters(observe(initial_state(0.0, CFG), reading(0.0), CFG), 1)
    assert next_wake_at(state, state.decide_release(10.0, CFG), 10.0, CFG) == 900.0


# ------------------------------------------------------------------------- interleavings

MACHINE_CONFIG = GateConfig(
    cooldown_seconds=5.0,
    poll_interval_seconds=1.0,
    stale_after_seconds=3.0,
    unit_pages=4,
    max_in_flight_pages=6,
    initial_concurrency=2,
    drain_window_seconds=4.0,
    unavailable_after_seconds=None,
    tuning=GateTuning(pace_min_rate=3.0),
)
"""Small numbers, so that cooldowns, the cap, refills and stalls all happen in short runs."""

DELAYS = [0.0, 0.1, 0.5, 1.0, 2.0, 4.0, 7.0]
AGES = [0.0, 0.0, 0.5, 2.9, 3.5, 10.0]


class Referee:
    """Drives the pure `step` as the runtime does, one event at a time, and checks every
    rule on what each step did.

    It keeps its own books (pages in flight by unit, waiters, completions of the newest
    unit) so the checks do not trust the policy's counters.
    """

    def __init__(self, config: GateConfig = MACHINE_CONFIG) -> None:
        self.config = config
        self.now = 0.0
        self.state = initial_state(0.0, config)
        self.pages: list[tuple[int, float]] = []  # (unit, dispatched at)
        self.queued = 0
        self.releases: list[float] = []
        self.latest_unit_done = 0
        self.preemptions = 0.0
        self.generated = 0.0
        self.holds: set[Reason] = set()
        self.peak_in_flight = 0
        self.peak_limit = 0
        self.back_unspent = 0  # pages the server finished since C last grew
        self.in_flight_at_reading = 0  # pages in flight when the newest reading came
        self.finished_at: float | None = None  # when the server last finished a page
        self.sent_on_stale = 0  # pages dispatched on a stale reading (the ACK clock)

    def waiters_arrive(self, n: int) -> None:
        for _ in range(n):
            self.queued += 1
            self.step(Joined())

    def waiter_gives_up(self) -> None:
        if self.queued:
            self.queued -= 1
            self.step(Left())

    def time_passes(self, dt: float) -> None:
        self.now += dt

    def scrape(
        self, waiting: int, running: int, kv: float, preempt: bool, moves: bool, age: float, healthy: bool
    ) -> None:
        self.preemptions += float(preempt)
        self.generated += float(moves)
        at = self.now - age
        if self.state.signals.reading is not None:
            at = max(at, self.state.signals.reading.at)
        r = reading(
            at,
            waiting=waiting,
            running=running,
            kv=kv,
            preemptions=self.preemptions,
            generated=self.generated,
            healthy=healthy,
        )
        before, estimated = self.state.concurrency.limit, self.state.concurrency.estimated
        self.in_flight_at_reading = len(self.pages)
        self.step(Scraped(r))
        grown = self.state.concurrency.limit - before
        if grown > 0:  # growth is paid for by pages back (docs/admission.md)
            assert self.back_unspent > 0, "C grew with no page back"
            if estimated:  # after the first reading's KV start, a reading at most doubles C
                assert grown <= before, "C more than doubled on one reading"
            self.back_unspent = 0

    def scrape_fails(self) -> None:
        self.step(Tick())  # what the runtime steps for a failed scrape

    def page_finishes(self, index: int, outcome: Outcome) -> None:
        if not self.pages:
            return
        unit, sent_at = self.pages.pop(index % len(self.pages))
        if outcome.server_finished and unit == self.state.units.units_released:
            self.latest_unit_done += 1
        self.back_unspent += outcome.server_finished
        if outcome.server_finished:
            self.finished_at = self.now
        self.step(Finished(outcome, unit, sent_at))

    def decide(self) -> None:
        self.step(Tick())

    def step(self, event: Any) -> None:
        """One step, then the checks of what it did."""
        config, now, before = self.config, self.now, self.state
        credits_before = before.units.open_credits
        self.state, actions = step(before, event, now, config)
        state, decision = self.state, actions.decision
        admitted = len(actions.admitted)
        if decision.release:
            r = state.signals.reading
            assert r is not None, "release without a reading"
            assert now - r.at <= config.stale_after_seconds, "release on a stale reading"
            assert r.healthy, "release on an unhealthy reading"
            peak = state.signals.peak
            assert r.waiting <= config.peak_ratio * peak, "release above the peak ratio"
            if self.releases:
                # The policy's own arithmetic (last + cooldown), not now - last: in floats
                # 17.3 - 12.3 is 4.999..., which a 5 s cooldown must not fail on.
                assert now >= self.releases[-1] + config.cooldown_seconds, "two units in a cooldown"
                assert self.latest_unit_done > 0, "release before progress"
            waiting_before = state.queued + admitted
            open_before = state.units.open_credits + admitted - decision.pages
            assert waiting_before > open_before, "release without demand"
            assert decision.pages == max(
                config.unit_pages, math.ceil(2 * state.rates.drain_rate() * config.cooldown_seconds))
            self.releases.append(now)
            self.latest_unit_done = 0
        else:
            self.holds.add(decision.reason)
            assert state.units.open_credits == credits_before - admitted + (
                isinstance(event, Finished) and not event.outcome.server_finished), "credits moved"
        if admitted:
            assert actions.paused is None, "page sent while paused"
        for unit in actions.admitted:
            self.pages.append((unit, now))
            self.queued -= 1
        r = state.signals.reading
        if admitted and r is not None and now - r.at > config.stale_after_seconds:
            # On a stale reading, pages only replace pages that came back (the ACK clock).
            self.sent_on_stale += admitted
            assert self.finished_at is not None, "page sent on a stale reading, none back"
            assert now - self.finished_at < config.stale_after_seconds, "no page back lately"
            assert state.in_flight <= self.in_flight_at_reading, "stale, yet more in flight"
        assert not actions.unavailable  # MACHINE_CONFIG never gives up on the server
        self.peak_in_flight = max(self.peak_in_flight, state.in_flight)
        self.peak_limit = max(self.peak_limit, state.concurrency.limit)
        assert actions.wake_at is None or actions.wake_at > now, "a wake-up in the past would spin"
        # Nothing waits that may go: every step admits all the pages it may.
        assert state.page_allowance(now, config) == 0, "a page left waiting that may go"

    def check(self) -> None:
        config, state = self.config, self.state
        assert state.in_flight == len(self.pages)
        assert state.queued == self.queued
        assert all(n > 0 for _, n in state.units.credits)
        assert [u for u, _ in state.units.credits] == sorted({u for u, _ in state.units.credits})
        assert state.in_flight <= config.max_in_flight_pages
        assert config.concurrency_start <= state.concurrency.limit <= config.max_in_flight_pages
        assert state.signals.peak >= 0.0


class GateMachine(RuleBasedStateMachine):
    """Hypothesis picks the interleaving; the referee checks the rules after every step."""

    @initialize()
    def start(self) -> None:
        self.ref = Referee()

    @rule(n=st.integers(1, 30))
    def waiters_arrive(self, n: int) -> None:
        self.ref.waiters_arrive(n)

    @precondition(lambda self: self.ref.queued > 0)
    @rule()
    def waiter_gives_up(self) -> None:
        self.ref.waiter_gives_up()

    @rule(dt=st.sampled_from(DELAYS))
    def time_passes(self, dt: float) -> None:
        self.ref.time_passes(dt)

    @rule(
        dt=st.sampled_from(DELAYS),
        waiting=st.sampled_from([0, 0, 0, 1, 3, 30]),
        running=st.integers(0, 40),
        finished=st.integers(0, 3),
    )
    def loop_turn(self, dt: float, waiting: int, running: int, finished: int) -> None:
        """What the runtime does most: time passes, pages finish, a fresh scrape, a decision."""
        self.ref.time_passes(dt)
        for i in range(finished):
            self.ref.page_finishes(i, Outcome.OK)
        self.ref.scrape(waiting, running, 0.5, False, True, 0.0, True)
        self.ref.decide()

    @rule(
        waiting=st.integers(0, 40),
        running=st.integers(0, 40),
        kv=st.floats(0.0, 1.0),
        preempt=st.booleans(),
        moves=st.booleans(),
        age=st.sampled_from(AGES),
        healthy=st.booleans(),
    )
    def scrape(
        self, waiting: int, running: int, kv: float, preempt: bool, moves: bool, age: float, healthy: bool
    ) -> None:
        self.ref.scrape(waiting, running, kv, preempt, moves, age, healthy or moves)

    @rule()
    def scrape_fails(self) -> None:
        self.ref.scrape_fails()

    @precondition(lambda self: bool(self.ref.pages))
    @rule(index=st.integers(0, 1000), outcome=st.sampled_from(list(Outcome)))
    def page_finishes(self, index: int, outcome: Outcome) -> None:
        self.ref.page_finishes(index, outcome)

    @rule()
    def decide(self) -> None:
        self.ref.decide()

    @invariant()
    def books_balance_and_bounds_hold(self) -> None:
        self.ref.check()


TestGateMachine = GateMachine.TestCase
TestGateMachine.settings = settings(
    max_examples=300,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_long_random_walk_exercises_every_rule() -> None:
    """A seeded 30,000-step walk: the same checks, and proof that each rule was reached."""
    rng = random.Random(20261131)
    ref = Referee()
    outcomes = list(Outcome)
    for _ in range(30_000):
        roll = rng.random()
        if roll < 0.06:
            ref.waiters_arrive(rng.randint(1, 8))
        elif roll < 0.12:
            ref.waiter_gives_up()
        elif roll < 0.30:
            ref.time_passes(rng.choice(DELAYS))
        elif roll < 0.50:
            busy = rng.random() < 0.7
            ref.scrape(
                waiting=rng.choice([0, 0, 0, 1, 2, 5, 30]),
                running=rng.randint(0, 40),
                kv=rng.choice([0.1, 0.5, 0.85, 0.95]),
                preempt=rng.random() < 0.05,
                moves=busy,
                age=rng.choice(AGES),
                healthy=rng.random() < 0.97,
            )
        elif roll < 0.53:
            ref.scrape_fails()
        elif roll < 0.63:  # mostly answered, a few at once: C grows only on pages back
            outcome = rng.choice([*outcomes, Outcome.OK, Outcome.OK])
            for _ in range(rng.randint(1, 3)):
                ref.page_finishes(rng.randint(0, 1000), outcome)
        else:
            ref.decide()
        ref.check()
    assert len(ref.releases) > 100
    # C reached the cap and was clamped there (check() holds in_flight <= cap throughout);
    # with growth clocked by pages back, the walk's in-flight count seldom follows it up.
    assert ref.peak_limit == MACHINE_CONFIG.max_in_flight_pages
    assert ref.peak_in_flight > MACHINE_CONFIG.initial_concurrency - 1
    assert ref.sent_on_stale > 0  # the walk reached dispatch on a stale reading
    for reason in (Reason.COOLDOWN, Reason.PROGRESS, Reason.PEAK_RATIO, Reason.STALE,
                   Reason.CREDITS_LEFT, Reason.NO_DEMAND,
                   Reason.UNHEALTHY, Reason.STALLED):
        assert reason in ref.holds, reason
