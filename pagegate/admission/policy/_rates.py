"""How fast the server gets through our pages, and the token bucket that paces pages to it.

drain  = completions / busy seconds, both decayed over drain_window_seconds (busy: something
         in flight or finished; sampling starts at the first completion)
recent = the same over smoothing_polls polls
pace   = max(pace_min_rate, pace_gain x max(drain, recent)) tokens/s, holding one poll's
         worth and never fewer than C's start; a page in flight takes a token
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from pagegate.admission.policy._config import GateConfig

TOKEN_SLACK = 1e-9
"""Refill arithmetic may leave 0.9999999 of a token; count it as a whole one."""


@dataclass(frozen=True, slots=True)
class Rates:
    drain_num: float = 0.0                       # decayed completions
    drain_den: float = 0.0                       # decayed busy seconds
    drain_at: float | None = None                # time of the last drain sample
    drain_completed: int = 0                     # completions counted up to drain_at
    latency_num: float = 0.0                     # decayed sum of page latencies
    latency_den: float = 0.0                     # decayed count of timed completions
    latency_at: float | None = None
    recent_num: float = 0.0                      # completions over smoothing_polls
    recent_den: float = 0.0                      # busy seconds, weighted the same


def sample_drain(
    rates: Rates, at: float, completed_total: int, in_flight: int, config: GateConfig
) -> Rates:
    """Fold the completions since the last sample into the drain (one sample per reading)."""
    if rates.drain_at is None:
        return replace(rates, drain_at=at, drain_completed=completed_total)
    dt = at - rates.drain_at
    finished = completed_total - rates.drain_completed
    num, den = rates.drain_num, rates.drain_den
    recent_num, recent_den = rates.recent_num, rates.recent_den
    if dt > 0 and completed_total > 0 and (finished > 0 or in_flight > 0):
        decay = math.exp(-dt / config.drain_window_seconds)
        num, den = num * decay + finished, den * decay + dt
        recent = math.exp(-dt / (config.tuning.smoothing_polls * config.poll_interval_seconds))
        recent_num, recent_den = recent_num * recent + finished, recent_den * recent + dt
    return replace(rates, drain_num=num, drain_den=den, drain_at=at, drain_completed=completed_total,
                   recent_num=recent_num, recent_den=recent_den)


def add_latency(rates: Rates, latency: float, now: float, config: GateConfig) -> Rates:
    """Fold one completed page's time in flight into the decayed mean."""
    num, den = rates.latency_num, rates.latency_den
    if rates.latency_at is not None and now > rates.latency_at:
        decay = math.exp(-(now - rates.latency_at) / config.drain_window_seconds)
        num, den = num * decay, den * decay
    return replace(rates, latency_num=num + max(0.0, latency), latency_den=den + 1.0, latency_at=now)


def drain(rates: Rates) -> float:
    """The drain as measured so far, in pages/s (0 before any)."""
    return rates.drain_num / rates.drain_den if rates.drain_den > 0.0 else 0.0


def pace_drain(rates: Rates) -> float:
    """The drain pacing follows: the larger of the window's and the last few polls'."""
    recent = rates.recent_num / rates.recent_den if rates.recent_den > 0.0 else 0.0
    return max(drain(rates), recent)


def mean_latency(rates: Rates) -> float | None:
    """Mean time in flight of recently completed pages; None before the first one."""
    return rates.latency_num / rates.latency_den if rates.latency_den > 0.0 else None


# ------------------------------------------------------------------ the token bucket


@dataclass(frozen=True, slots=True)
class Bucket:
    tokens: float                                # level at `at`
    at: float


def pace_rate(rates: Rates, config: GateConfig) -> float:
    """The bucket's refill rate in pages/s."""
    return max(config.tuning.pace_min_rate, config.tuning.pace_gain * pace_drain(rates))


def _capacity(refill: float, config: GateConfig) -> float:
    return max(float(config.concurrency_start), refill * config.poll_interval_seconds)


def full_bucket(now: float, config: GateConfig) -> Bucket:
    return Bucket(_capacity(config.tuning.pace_min_rate, config), now)


def _level(bucket: Bucket, now: float, refill: float, config: GateConfig) -> float:
    return min(_capacity(refill, config), bucket.tokens + refill * max(0.0, now - bucket.at))


def whole_tokens(bucket: Bucket, now: float, refill: float, config: GateConfig) -> int:
    return math.floor(_level(bucket, now, refill, config) + TOKEN_SLACK)


def next_token_at(bucket: Bucket, now: float, refill: float, config: GateConfig) -> float:
    """When the bucket next holds a whole token."""
    missing = 1.0 - _level(bucket, now, refill, config)
    return now if missing <= TOKEN_SLACK else now + missing / refill


def take(bucket: Bucket, now: float, refill: float, config: GateConfig) -> Bucket:
    """One page goes in flight."""
    return Bucket(max(0.0, _level(bucket, now, refill, config) - 1.0), now)
