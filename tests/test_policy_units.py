"""The policy's units part: credits and the release decision's rules."""

from __future__ import annotations

import dataclasses

import pytest

from pagegate.admission.policy import GateConfig, Reason, initial_state
from pagegate.admission.policy._limit import Concurrency, Units
from pagegate.admission.policy._signals import Rates, Ratio, Signals
from pagegate.server.metrics import Reading

CFG = GateConfig()


def test_credits_are_spent_oldest_unit_first_and_come_back_to_their_unit() -> None:
    units = Units(credits=((1, 1), (2, 2)))
    units, first = units.spend()
    units, second = units.spend()
    assert (first, second, units.credits) == (1, 2, ((2, 1),))
    units = units.give_back(1)
    assert units.credits == ((1, 1), (2, 1))


@pytest.mark.parametrize(("unit", "newest", "counted"), [(3, 3, 1), (2, 3, 0)])
def test_only_completions_of_the_newest_unit_are_progress(unit: int, newest: int, counted: int) -> None:
    assert Units(units_released=newest).completed(unit).unit_completed == counted


def rules(
    units: Units, *, queued: int = 100, room: int = 0, waiting: int = 0, peak: float = 100.0,
    now: float = 40.0, config: GateConfig = CFG,
) -> tuple[Reason, float | None] | None:
    """The release decision of a gate with a fresh, healthy reading at `now`."""
    signals = Signals(reading=Reading(waiting=waiting, running=0, kv_usage=0.0, at=now),
                      usable_since=now, peak=peak)
    state = initial_state(0.0, config)
    state = dataclasses.replace(state, units=units, queued=queued, signals=signals,
                                concurrency=Concurrency(limit=room))
    decision = state.decide_release(now, config)
    if decision.release:
        assert decision.pages == state.unit_size(config)
        return None
    return (decision.reason, decision.recheck_at)


DONE = Units(units_released=1, last_release_at=0.0, unit_completed=1)
"""One unit of 100 released at t = 0, used up, with a page of it completed."""


@pytest.mark.parametrize(
    ("units", "kwargs", "held"),
    [
        (DONE, {}, None),
        (Units(), {}, None),                                            # the first release
        (Units(), {"waiting": 1, "peak": 0.0}, (Reason.PEAK_RATIO, None)),  # ready and idle only
        (DONE, {"queued": 0}, (Reason.NO_DEMAND, None)),
        (Units(credits=((1, 5),)), {"queued": 5}, (Reason.NO_DEMAND, None)),
        # rule 2, peak ratio: 0.1 x 100 waiting at most
        (DONE, {"waiting": 10}, None),
        (DONE, {"waiting": 11}, (Reason.PEAK_RATIO, None)),
        (DONE, {"waiting": 11, "config": GateConfig(peak_ratio=0.2)}, None),
        # rule 3, cooldown (30 s), with the time the answer changes
        (DONE, {"now": 29.9}, (Reason.COOLDOWN, 30.0)),
        (DONE, {"now": 30.0}, None),
        (DONE, {"now": 5.0, "config": GateConfig(cooldown_seconds=5.0)}, None),
        # rule 4, progress
        (Units(units_released=1, last_release_at=0.0), {}, (Reason.PROGRESS, None)),
        (Units(units_released=1, last_release_at=0.0), {"config": GateConfig(require_progress=False)},
         None),
        # credits left: a release waits until they are used up or C has more room
        (Units(credits=((1, 26),), units_released=1, last_release_at=0.0,
               unit_completed=1), {"room": 26}, (Reason.CREDITS_LEFT, None)),
        (Units(credits=((1, 26),), units_released=1, last_release_at=0.0,
               unit_completed=1), {"room": 27}, None),
        (Units(credits=((1, 1),), units_released=1, last_release_at=0.0,
               unit_completed=1), {"room": 0}, (Reason.CREDITS_LEFT, None)),
    ],
)
def test_release_rules(units: Units, kwargs: dict[str, object], held: tuple[Reason, float | None] | None) -> None:
    assert rules(units, **kwargs) == held  # type: ignore[arg-type]


def test_a_release_grants_a_new_unit_and_resets_its_progress() -> None:
    before = Units(credits=((1, 3),), units_released=1, last_release_at=0.0, unit_completed=4)
    after = before.grant(80, 40.0)
    assert after == Units(credits=((1, 3), (2, 80)), units_released=2, last_release_at=40.0,
                          unit_completed=0)


@pytest.mark.parametrize(
    ("drain", "config", "pages"),
    [
        (0.0, CFG, 1024),                                   # nothing measured: unit_pages
        (17.0, CFG, 1024),                                  # 2 x 17 x 30 = 1,020: still unit_pages
        (20.0, CFG, 1200),                                  # a fast server: two cooldowns of drain
        (20.0, GateConfig(cooldown_seconds=2.0, unit_pages=32), 80),
        (0.01, GateConfig(unit_pages=1), 1),                # ceil(0.6)
        (20.0, GateConfig(cooldown_seconds=0.0), 1024),
    ],
)
def test_unit_size(drain: float, config: GateConfig, pages: int) -> None:
    state = dataclasses.replace(initial_state(0.0, config), rates=Rates(drain=Ratio(drain, 1.0)))
    assert state.unit_size(config) == pages
