"""The pacing token bucket: pages reach the server at about the rate it drains them.

Each page put in flight takes a token. The bucket refills at a multiple of the drain
measured so far (from the first completions on: a fast server shows its rate within a
second; the larger of the window's drain and the last polls', `rates.pace_drain`, since
the window's mean trails a ramp), never below a floor rate. It holds one poll interval's worth of tokens, and
never fewer than C's floor: with a short poll, one poll's worth is a single token and
every late wake-up of the decision loop would throw refill away, while letting C's
floor through at once is never a burst the page level would not allow anyway. Little's
law is not used here: with few completions its latency is that of a few short pages
while what is in flight keeps growing, so it would feed its own growth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pagegate.admission.policy.config import GateConfig

TOKEN_SLACK = 1e-9
"""Refill arithmetic may leave 0.9999999 of a token; count it as a whole one."""


@dataclass(frozen=True, slots=True)
class Bucket:
    tokens: float                                # level at `at`
    at: float


def rate(drained: float, config: GateConfig) -> float:
    """Refill rate in pages/s, from the drain measured so far (`rates.pace_drain`)."""
    return max(config.tuning.pace_min_rate, config.tuning.pace_gain * drained)


def capacity(refill: float, config: GateConfig) -> float:
    """One poll interval's worth of tokens, and never fewer than C's floor."""
    return max(float(config.concurrency_floor), refill * config.poll_interval_seconds)


def full(now: float, config: GateConfig) -> Bucket:
    """The first bucket: full at the floor rate."""
    return Bucket(capacity(config.tuning.pace_min_rate, config), now)


def level(bucket: Bucket, now: float, refill: float, config: GateConfig) -> float:
    elapsed = max(0.0, now - bucket.at)
    return min(capacity(refill, config), bucket.tokens + refill * elapsed)


def whole_tokens(bucket: Bucket, now: float, refill: float, config: GateConfig) -> int:
    return math.floor(level(bucket, now, refill, config) + TOKEN_SLACK)


def next_token_at(bucket: Bucket, now: float, refill: float, config: GateConfig) -> float:
    """When the bucket next holds a whole token."""
    missing = 1.0 - level(bucket, now, refill, config)
    if missing <= TOKEN_SLACK:
        return now
    return now + missing / refill


def take(bucket: Bucket, now: float, refill: float, config: GateConfig) -> Bucket:
    """One page goes in flight."""
    return Bucket(max(0.0, level(bucket, now, refill, config) - 1.0), now)
