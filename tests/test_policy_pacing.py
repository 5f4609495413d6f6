"""The policy's pacing part: the token bucket's rate, size, refill and spending."""

from __future__ import annotations

import math

import pytest

from pagegate.admission.policy import GateConfig, GateTuning, initial_state
from pagegate.admission.policy._limit import Bucket
from pagegate.admission.policy._signals import Rates, Ratio

CFG = GateConfig()


@pytest.mark.parametrize(
    ("drained", "tuning", "expected"),
    [
        (0.0, GateTuning(), 10.0),                     # nothing measured: the floor
        (2.0, GateTuning(), 10.0),                     # 4 x 2 is under the floor
        (27.0, GateTuning(), 108.0),                   # four times the drain
        (27.0, GateTuning(pace_gain=1.0), 27.0),
        (0.0, GateTuning(pace_min_rate=3.0), 3.0),
    ],
)
def test_refill_rate_follows_the_drain_above_a_floor(
    drained: float, tuning: GateTuning, expected: float
) -> None:
    assert Rates(drain=Ratio(drained, 1.0)).pace(GateConfig(tuning=tuning)) == expected


@pytest.mark.parametrize(
    ("refill", "config", "size"),
    [
        (10.0, CFG, 10.0),                                               # one poll's worth
        (54.0, CFG, 54.0),
        (10.0, GateConfig(poll_interval_seconds=0.1, stale_after_seconds=3.0), 4.0),  # C's start
        (10.0, GateConfig(initial_concurrency=2), 10.0),
        (1.0, GateConfig(initial_concurrency=2), 2.0),                   # it follows C's start
    ],
)
def test_the_bucket_holds_a_poll_of_tokens_but_never_fewer_than_c_floor(
    refill: float, config: GateConfig, size: float
) -> None:
    assert Bucket(math.inf, 0.0).level(0.0, refill, config) == size


@pytest.mark.parametrize(
    ("tokens", "elapsed", "refill", "level_after", "whole"),
    [
        (0.0, 0.0, 10.0, 0.0, 0),
        (0.0, 0.35, 10.0, 3.5, 3),
        (0.0, 2.0, 10.0, 10.0, 10),         # idle time does not pile up past the size
        (2.0, -1.0, 10.0, 2.0, 2),          # a clock behind the bucket adds nothing
        (0.9999999999, 0.0, 10.0, 0.9999999999, 1),  # refill arithmetic's last bit counts
    ],
)
def test_level_refills_with_time_up_to_the_size(
    tokens: float, elapsed: float, refill: float, level_after: float, whole: int
) -> None:
    bucket = Bucket(tokens, 5.0)
    assert bucket.level(5.0 + elapsed, refill, CFG) == pytest.approx(level_after)
    assert bucket.whole_tokens(5.0 + elapsed, refill, CFG) == whole


@pytest.mark.parametrize(
    ("tokens", "refill", "wake"),
    [(0.0, 10.0, 0.1), (0.5, 2.0, 0.25), (1.0, 2.0, 0.0), (3.0, 2.0, 0.0)],
)
def test_next_token_is_when_the_level_reaches_one(tokens: float, refill: float, wake: float) -> None:
    assert Bucket(tokens, 0.0).next_token_at(0.0, refill, CFG) == pytest.approx(wake)


def test_a_page_takes_one_token_and_the_first_bucket_is_full() -> None:
    bucket = initial_state(7.0, CFG).bucket
    assert bucket.level(7.0, 10.0, CFG) == 10.0
    assert bucket.take(7.0, 10.0, CFG) == Bucket(9.0, 7.0)
    assert Bucket(0.5, 0.0).take(0.0, 10.0, CFG) == Bucket(0.0, 0.0)  # never negative
    refilled = Bucket(0.0, 0.0).take(0.2, 10.0, CFG)  # two tokens came in, one went out
    assert refilled.tokens == pytest.approx(1.0)
    assert refilled.at == 0.2
