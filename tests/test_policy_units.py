"""The policy's units part: credits, the release rules, the dry gap and unit sizing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pagegate.admission.policy import GateConfig, GateTuning, Reason
from pagegate.admission.policy.units import (
    Units,
    after_reading,
    completed,
    dry_gap,
    give_back,
    grant,
    mark_dry,
    release_rules,
    size,
    spend,
    uncovered_room,
)

CFG = GateConfig()


def test_credits_are_spent_oldest_unit_first_and_come_back_to_their_unit() -> None:
    units = Units(credits=((1, 1), (2, 2)))
    units, first = spend(units)
    units, second = spend(units)
    assert (first, second, units.credits) == (1, 2, ((2, 1),))
    units = give_back(replace(units, dry_since=3.0), 1)
    assert (units.credits, units.dry_since) == (((1, 1), (2, 1)), None)


@pytest.mark.parametrize(("unit", "newest", "counted"), [(3, 3, 1), (2, 3, 0)])
def test_only_completions_of_the_newest_unit_are_progress(unit: int, newest: int, counted: int) -> None:
    assert completed(Units(units_released=newest), unit).unit_completed == counted


@pytest.mark.parametrize(
    ("queued", "credits", "since", "expected"),
    [
        (3, (), None, 5.0),        # pages wait, no credit: the dry clock starts
        (3, (), 2.0, 2.0),         # already running: unchanged
        (3, ((1, 1),), 2.0, None),  # a credit to take: stopped
        (0, (), 2.0, None),        # nobody waits: stopped
    ],
)
def test_the_dry_clock(
    queued: int, credits: tuple[tuple[int, int], ...], since: float | None, expected: float | None
) -> None:
    assert mark_dry(Units(credits=credits, dry_since=since), queued, 5.0).dry_since == expected


@pytest.mark.parametrize(
    ("queued", "credits", "has_room", "starved"),
    [(3, (), True, True), (3, (), False, False), (3, ((1, 2),), True, False), (0, (), True, False)],
)
def test_a_unit_starved_when_it_ran_dry_while_the_server_had_room(
    queued: int, credits: tuple[tuple[int, int], ...], has_room: bool, starved: bool
) -> None:
    after = after_reading(Units(credits=credits), queued, server_has_room=has_room, now=1.0)
    assert after.starved is starved


def rules(
    units: Units, *, queued: int = 100, room: int = 0, waiting: int = 0, peak: float = 100.0,
    now: float = 40.0, config: GateConfig = CFG,
) -> tuple[Reason, float | None] | None:
    held = release_rules(units, queued=queued, room=room, waiting=waiting, peak=peak, now=now,
                         config=config)
    return None if held is None else (held.reason, held.recheck_at)


DONE = Units(units_released=1, last_release_at=0.0, last_unit_pages=100, unit_completed=1)
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
        # refill: under a quarter of the last unit left, or more room than credits
        (Units(credits=((1, 26),), units_released=1, last_release_at=0.0, last_unit_pages=100,
               unit_completed=1), {}, (Reason.CREDITS_LEFT, None)),
        (Units(credits=((1, 25),), units_released=1, last_release_at=0.0, last_unit_pages=100,
               unit_completed=1), {}, None),
        (Units(credits=((1, 26),), units_released=1, last_release_at=0.0, last_unit_pages=100,
               unit_completed=1), {"room": 27}, None),
        (Units(credits=((1, 26),), units_released=1, last_release_at=0.0, last_unit_pages=100,
               unit_completed=1), {"config": GateConfig(tuning=GateTuning(refill_fraction=0.5))},
         None),
    ],
)
def test_release_rules(units: Units, kwargs: dict[str, object], held: tuple[Reason, float | None] | None) -> None:
    assert rules(units, **kwargs) == held  # type: ignore[arg-type]


def test_a_release_grants_a_new_unit_and_resets_its_progress() -> None:
    before = Units(credits=((1, 3),), units_released=1, last_release_at=0.0, last_unit_pages=50,
                   unit_completed=4, starved=True, dry_since=38.0, dry_seconds=0.0)
    after = grant(before, 80, 40.0, CFG)
    assert after == Units(credits=((1, 3), (2, 80)), units_released=2, last_release_at=40.0,
                          last_unit_pages=80, unit_completed=0, starved=False, dry_since=None,
                          dry_seconds=2.0)


@pytest.mark.parametrize(
    ("units", "now", "tuning", "gap"),
    [
        (Units(dry_since=3.0), 5.0, GateTuning(), 0.0),       # before the first release: none
        (Units(last_release_at=0.0, dry_since=3.0), 5.0, GateTuning(), 2.0),
        (Units(last_release_at=0.0, dry_seconds=4.0), 5.0, GateTuning(), 2.0),  # halves
        (Units(last_release_at=0.0, dry_seconds=4.0), 5.0, GateTuning(dry_gap_decay=0.75), 3.0),
        (Units(last_release_at=0.0, dry_since=3.0, dry_seconds=10.0), 5.0, GateTuning(), 5.0),
        (Units(last_release_at=0.0, dry_since=1.0), 600.0, GateTuning(), 30.0),  # one cooldown at most
    ],
)
def test_dry_gap(units: Units, now: float, tuning: GateTuning, gap: float) -> None:
    assert dry_gap(units, now, GateConfig(tuning=tuning)) == gap


@pytest.mark.parametrize(
    ("units", "rate", "room", "tuning", "pages"),
    [
        (Units(), None, 0, GateTuning(), 1024),                       # nothing measured
        (Units(), 2.0, 0, GateTuning(), 90),                          # 2 x 30 s x 1.5
        (Units(), 2.0, 0, GateTuning(unit_margin=1.0), 60),
        (Units(credits=((1, 20),)), 2.0, 60, GateTuning(), 130),      # + uncovered room 40
        (Units(dry_seconds=10.0), 2.0, 0, GateTuning(), 120),         # 2 x 40 s x 1.5
        (Units(), 0.1, 0, GateTuning(), 16),                          # the floor
        (Units(), 200.0, 0, GateTuning(), 3200),                      # the ceiling
        (Units(), 200.0, 0, GateTuning(max_unit_pages=500), 500),
        (Units(starved=True, last_unit_pages=90), 2.0, 0, GateTuning(), 180),  # double
        (Units(starved=True, last_unit_pages=90), 2.0, 0, GateTuning(starved_unit_factor=3), 270),
        (Units(starved=True, last_unit_pages=1024), None, 0, GateTuning(), 2048),
    ],
)
def test_unit_size(units: Units, rate: float | None, room: int, tuning: GateTuning, pages: int) -> None:
    assert size(units, rate, room, GateConfig(tuning=tuning)) == pages


def test_an_open_dry_gap_counts_at_once_when_sizing_with_now() -> None:
    units = Units(last_release_at=0.0, dry_since=30.0)
    assert size(units, 2.0, 0, CFG) == 90
    assert size(units, 2.0, 0, CFG, now=40.0) == 120


@pytest.mark.parametrize(("room", "credits", "uncovered"), [(60, 20, 40), (10, 20, 0), (-5, 0, 0)])
def test_uncovered_room(room: int, credits: int, uncovered: int) -> None:
    assert uncovered_room(Units(credits=((1, credits),) if credits else ()), room) == uncovered
