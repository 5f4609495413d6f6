"""The per-page retry plan: temperatures, rotation, acceptance and fallback."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagegate.ocr.attempts import Attempt, AttemptPlan
from pagegate.vlm.profiles import get_profile
from pagegate.vlm.reply import PageReply

PROFILE = get_profile("olmocr-2")


def reply(valid: bool = True, correction: int = 0, text: str = "t") -> PageReply:
    return PageReply("en", valid, correction, False, False, text)


OK = reply()
R90 = reply(False, 90, "sideways-90")
R180 = reply(False, 180, "upside-down")
R270 = reply(False, 270, "sideways-270")
ERR = "unparseable"

Event = PageReply | str


def run(events: list[Event], max_attempts: int | None = None) -> tuple[AttemptPlan, list[Attempt]]:
    """Feed events to a fresh plan; return the final plan and the attempts it asked for."""
    plan = AttemptPlan.start(PROFILE, max_attempts)
    asked = []
    for event in events:
        asked.append(plan.current)
        plan = plan.on_content_error(event) if isinstance(event, str) else plan.on_reply(event)
    return plan, asked


def test_fresh_plan_asks_for_attempt_zero_upright_at_point_one() -> None:
    plan = AttemptPlan.start(PROFILE)
    assert plan.current == Attempt(number=0, temperature=0.1, rotation=0)
    assert plan.max_attempts == 8
    assert not plan.done and not plan.exhausted
    assert plan.accepted is None and plan.best_parsed is None and plan.errors == ()
    assert plan.attempts_left == 8


def test_content_errors_walk_the_olmocr_temperature_schedule() -> None:
    plan, asked = run([ERR] * 8)
    assert [a.temperature for a in asked] == [0.1, 0.1, 0.2, 0.3, 0.5, 0.8, 0.9, 1.0]
    assert [a.number for a in asked] == list(range(8))
    assert {a.rotation for a in asked} == {0}
    assert plan.exhausted and plan.done and plan.accepted is None
    assert plan.errors == tuple(f"attempt {n}: unparseable" for n in range(8))
    assert plan.attempts_made == 8 and plan.attempts_left == 0


def test_more_attempts_than_temperatures_reuse_the_last_one() -> None:
    plan, asked = run([ERR] * 10, max_attempts=10)
    assert [a.temperature for a in asked][-3:] == [1.0, 1.0, 1.0]
    assert plan.exhausted


@pytest.mark.parametrize(
    "events, max_attempts, accepted, exhausted, rotations_asked, attempts_made",
    [
        # accepted at once
        ([OK], None, OK, False, [0], 1),
        # content errors, then a good reply
        ([ERR, ERR, OK], None, OK, False, [0, 0, 0], 3),
        # rotation: the next attempt is re-rendered at the cumulative angle
        ([R90, OK], None, OK, False, [0, 90], 2),
        ([R90, R90, OK], None, OK, False, [0, 90, 180], 3),
        ([R270, R180, OK], None, OK, False, [0, 270, 90], 3),  # (270 + 180) % 360
        ([R90, R270, OK], None, OK, False, [0, 90, 0], 3),  # back to upright
        # a content error keeps the current rotation
        ([R90, ERR, OK], None, OK, False, [0, 90, 90], 3),
        # rotation never validates: the last attempt's reply is accepted
        ([R90] * 8, None, R90, False, [0, 90, 180, 270, 0, 90, 180, 270], 8),
        ([ERR] * 7 + [R180], None, R180, False, [0] * 8, 8),
        # rotation-invalid earlier, content errors to the end: the last parsed reply wins
        ([R90, ERR, ERR, ERR, ERR, ERR, ERR, ERR], None, R90, False, [0] + [90] * 7, 8),
        ([R90, R180, ERR, ERR, ERR, ERR, ERR, ERR], None, R180, False, [0, 90] + [270] * 6, 8),
        # nothing parsed at all: fall back
        ([ERR] * 8, None, None, True, [0] * 8, 8),
        # a one-attempt budget
        ([R90], 1, R90, False, [0], 1),
        ([ERR], 1, None, True, [0], 1),
        ([R90, ERR], 2, R90, False, [0, 90], 2),
        ([ERR, R270], 2, R270, False, [0, 0], 2),
    ],
)
def test_plan_outcomes(
    events: list[Event],
    max_attempts: int | None,
    accepted: PageReply | None,
    exhausted: bool,
    rotations_asked: list[int],
    attempts_made: int,
) -> None:
    plan, asked = run(events, max_attempts)
    assert plan.accepted == accepted
    assert plan.exhausted is exhausted
    assert plan.done
    assert [a.rotation for a in asked] == rotations_asked
    assert plan.attempts_made == attempts_made


def test_errors_tell_the_story_of_rotation_and_content_failures() -> None:
    plan, _ = run([R90, ERR, OK])
    assert plan.errors == (
        "attempt 0: rotation invalid at 0°, correction 90° -> next at 90°",
        "attempt 1: unparseable",
    )


def test_best_parsed_is_the_last_parsed_reply() -> None:
    plan, _ = run([R90, ERR])
    assert plan.best_parsed == R90 and plan.accepted is None
    plan, _ = run([R90, R180])
    assert plan.best_parsed == R180


@pytest.mark.parametrize("events", [[OK], [ERR] * 8, [R90] * 8])
def test_a_done_plan_refuses_further_use(events: list[Event]) -> None:
    plan, _ = run(events)
    with pytest.raises(RuntimeError, match="done"):
        _ = plan.current
    with pytest.raises(RuntimeError):
        plan.on_reply(OK)
    with pytest.raises(RuntimeError):
        plan.on_content_error(ERR)


def test_plans_are_immutable_values() -> None:
    start = AttemptPlan.start(PROFILE)
    after = start.on_reply(R90)
    assert start.current == Attempt(0, 0.1, 0)
    assert after.current == Attempt(1, 0.1, 90)
    with pytest.raises(dataclasses.FrozenInstanceError):
        after.rotation = 0  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"max_attempts": -1}],
)
def test_start_rejects_an_empty_budget(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        AttemptPlan.start(PROFILE, **kwargs)


def test_direct_construction_is_checked() -> None:
    with pytest.raises(ValueError, match="rotation"):
        AttemptPlan(temperatures=(0.1,), max_attempts=2, rotation=45)
    with pytest.raises(ValueError, match="attempts_made"):
        AttemptPlan(temperatures=(0.1,), max_attempts=2, attempts_made=3)
    with pytest.raises(ValueError, match="temperature"):
        AttemptPlan(temperatures=(), max_attempts=2)


events_strategy = st.lists(
    st.sampled_from([OK, R90, R180, R270, reply(False, 0, "confused"), ERR]), min_size=1, max_size=12
)


@given(events_strategy, st.integers(min_value=1, max_value=10))
def test_plan_matches_a_reference_model(events: list[Event], max_attempts: int) -> None:
    plan = AttemptPlan.start(PROFILE, max_attempts)
    rotation, last_parsed, used = 0, None, 0
    expected_accepted: PageReply | None = None
    for number, event in enumerate(events):
        if plan.done:
            break
        assert plan.current.rotation == rotation
        assert plan.current.number == number
        assert plan.current.temperature == PROFILE.temperatures[min(number, 7)]
        used = number + 1
        if isinstance(event, str):
            plan = plan.on_content_error(event)
            if used == max_attempts:
                expected_accepted = last_parsed
        else:
            plan = plan.on_reply(event)
            last_parsed = event
            if event.is_rotation_valid or used == max_attempts:
                expected_accepted = event
            else:
                rotation = (rotation + event.rotation_correction) % 360
        assert plan.attempts_made == used <= max_attempts
        assert plan.accepted == expected_accepted
        assert plan.best_parsed == last_parsed
        assert len(plan.errors) == used - (1 if plan.accepted is not None and isinstance(event, PageReply) else 0)
    if plan.done:
        assert (plan.accepted is None) == plan.exhausted
        assert plan.exhausted == (last_parsed is None)
