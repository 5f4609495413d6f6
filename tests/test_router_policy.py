"""The router's pure rules, checked over every small case: choice, refusals, rotation."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from pagegate.admission.base import Outcome
from pagegate.admission.routing import (
    ServerHealth,
    ServerLoad,
    after_outcome,
    choose_server,
    in_rotation,
)

LOADS = [ServerLoad(rotating, assigned, capacity)
         for rotating in (False, True) for assigned in range(4) for capacity in (1, 2, 3)]


@pytest.mark.parametrize("servers", [1, 2, 3])
def test_choice_is_the_lowest_index_among_the_least_loaded_in_rotation(servers: int) -> None:
    cases = 0
    for loads in itertools.product(LOADS, repeat=servers):
        chosen = choose_server(loads)
        rotating = [i for i, load in enumerate(loads) if load.in_rotation]
        cases += 1
        if not rotating:
            assert chosen is None
            continue
        ratio = {i: Fraction(loads[i].assigned, loads[i].capacity) for i in rotating}
        least = min(ratio.values())
        assert chosen == min(i for i in rotating if ratio[i] == least), loads
    assert cases == len(LOADS) ** servers


def test_a_bigger_server_takes_proportionally_more() -> None:
    loads = [ServerLoad(True, 0, 1), ServerLoad(True, 0, 3)]
    picks = []
    for _ in range(8):
        index = choose_server(loads)
        assert index is not None
        picks.append(index)
        load = loads[index]
        loads[index] = ServerLoad(True, load.assigned + 1, load.capacity)
    assert picks.count(1) == 6 and picks.count(0) == 2


def test_refusals_in_a_row_take_a_server_out_and_an_answer_clears_them() -> None:
    for limit in (1, 2, 3):
        health = ServerHealth()
        for n in range(1, limit + 2):
            health = after_outcome(health, Outcome.CAPACITY, float(n), limit)
            assert health.refusals == n
            assert (health.refused_at is not None) == (n >= limit)
        if limit > 1:
            assert health.refused_at == float(limit + 1), "the newest refusal counts"
        for answer in (Outcome.OK, Outcome.CONTENT):
            assert after_outcome(health, answer, 9.0, limit) == ServerHealth()
        assert after_outcome(health, Outcome.CANCELLED, 9.0, limit) == health


@pytest.mark.parametrize(
    ("paused", "refused_at", "reading_at", "now", "expected"),
    [
        (False, None, None, 0.0, True),
        (True, None, 5.0, 6.0, False),     # a paused gate: never, whatever else
        (True, 1.0, 5.0, 99.0, False),
        (False, 10.0, 9.0, 11.0, False),   # refused, no newer reading, in probation
        (False, 10.0, 10.0, 11.0, False),  # a reading from the same instant is not newer
        (False, 10.0, 10.5, 11.0, True),   # a newer reading: back
        (False, 10.0, None, 14.9, False),  # no readings at all: probation...
        (False, 10.0, None, 15.0, True),   # ...then back
    ],
)
def test_rotation(
    paused: bool, refused_at: float | None, reading_at: float | None, now: float, expected: bool
) -> None:
    health = ServerHealth(refusals=2 if refused_at is not None else 0, refused_at=refused_at)
    assert in_rotation(health, paused=paused, reading_at=reading_at, now=now,
                       probation_seconds=5.0) is expected
