"""The capacity backoff: doubles, is capped, and spreads pages by jitter."""

from __future__ import annotations

import random

import pytest

from pagegate.ocr.backoff import BackoffPolicy, capacity_backoff


def test_doubles_to_the_cap_without_jitter() -> None:
    delays = [capacity_backoff(n, base=1.0, cap=30.0) for n in range(0, 9)]
    assert delays == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert capacity_backoff(10_000, base=1.0, cap=30.0) == 30.0, "no overflow on long outages"


@pytest.mark.parametrize("jitter", [0.0, 0.5, 1.0])
def test_jitter_stays_within_the_capped_window(jitter: float) -> None:
    policy = BackoffPolicy(base=0.5, cap=4.0, jitter=jitter)
    for failures in range(1, 40):
        ceiling = min(4.0, 0.5 * 2 ** (failures - 1))
        low = policy.delay(failures, 0.0)
        assert low == pytest.approx(ceiling * (1 - jitter))
        for draw in (0.0, 0.25, 0.5, 0.999):
            delay = policy.delay(failures, draw)
            assert ceiling * (1 - jitter) - 1e-12 <= delay <= ceiling


def test_pages_that_failed_together_come_back_spread_out() -> None:
    policy = BackoffPolicy(base=1.0, cap=30.0, jitter=0.5)
    rng = random.Random(7)
    delays = [policy.delay(10, rng.random()) for _ in range(1000)]
    assert min(delays) >= 15.0 and max(delays) <= 30.0
    assert len({round(d, 3) for d in delays}) > 900, "not one instant for everyone"
    assert max(delays) - min(delays) > 12.0


@pytest.mark.parametrize(("base", "cap", "jitter"), [(0.0, 1.0, 0.5), (2.0, 1.0, 0.5),
                                                     (1.0, 2.0, -0.1), (1.0, 2.0, 1.5)])
def test_bad_policies_are_refused(base: float, cap: float, jitter: float) -> None:
    with pytest.raises(ValueError):
        BackoffPolicy(base=base, cap=cap, jitter=jitter)
