"""How many credited pages may be in flight (the adaptive limit C), and how fast they may
go (the token bucket).

C steers the server's queue to a small band on each usable reading (`update`); it starts
at `initial_concurrency`, never falls below it, and never passes `max_in_flight_pages`.

pace = max(pace_min_rate, pace_gain x max(drain, recent)) tokens/s, holding one poll's
       worth and never fewer than C's start; a page in flight takes a token
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

from pagegate.admission.policy import _signals
from pagegate.admission.policy._config import SLACK, GateConfig
from pagegate.admission.policy._signals import Rates
from pagegate.server.metrics import Reading


class Case(enum.StrEnum):
    """Which rule of `update` set C."""

    PREEMPTED = "preempted"
    ABOVE_BAND = "above_band"
    SLOW_START = "slow_start"
    ADDITIVE = "additive"
    HOLD = "hold"


@dataclass(frozen=True, slots=True)
class Concurrency:
    limit: int                               # C
    slow_start: bool = True
    running_seen: int = 0                    # running at the last usable reading
    acked: int = 0                           # pages back since the last usable reading
    estimated: bool = False                  # the first reading's KV start was applied
    case: Case = Case.HOLD                   # the rule of the last update


def waiting_band(drain: float, transit: float, config: GateConfig) -> float:
    """band = max(waiting_band_min, drain x (poll + transit)): what the engine takes in
    while the next pages travel to it."""
    return max(config.tuning.waiting_band_min, drain * (config.poll_interval_seconds + transit))


def update(
    c: Concurrency, reading: Reading, *, queue: float, peak: float, in_flight: int,
    preempted: bool, drain: float, transit: float, latency: float | None, config: GateConfig,
) -> Concurrency:
    """C on a usable reading; n = in flight, q = queue, band as `waiting_band` (0 while KV
    use > kv_cache_ceiling), acked = pages back since the last reading, taking in = running
    grew since the last reading and KV use <= kv_cache_ceiling:

    C  = max(C, floor(kv_max_concurrency x kv_cache_ceiling))   first reading only
    PREEMPTED   a preemption:         C' = min(C, floor(preemption_backoff x n)), slow start ends
    ABOVE_BAND  q > band, not taking in: C' = min(C, n - ceil(excess_cut_share x (q - band))),
                                      slow start ends
    SLOW_START  q < band, acked > 0, in slow start or C < far_below_share x peak:
                                      C' = C + min(C, KV room), C' = 2C where KV use
                                                   < kv_signal_floor
    ADDITIVE    q < band, acked > 0:  C' = C + min(acked,
                                                   max(1, ceil(additive_growth_fraction x C)))
    HOLD        otherwise:            C' = C  (a queue the engine is taking in is not cut)
    then, while the mean page latency > page_latency_limit: C' = min(C', C, ceil(drain x limit)),
    and C' within [initial_concurrency, max_in_flight_pages].
    """
    tuning = config.tuning
    c = _first_estimate(c, reading, config)
    acked, limit, slow_start, case = c.acked, c.limit, c.slow_start, Case.HOLD
    pressured = reading.kv_usage > config.kv_cache_ceiling
    taking_in = _taking_in(reading, c.running_seen, config)
    c = replace(c, acked=0, running_seen=reading.running)
    band = 0.0 if pressured else waiting_band(drain, transit, config)
    if preempted:
        limit = min(limit, math.floor(in_flight * tuning.preemption_backoff))
        slow_start, case = False, Case.PREEMPTED
    elif queue > band and not taking_in:
        excess = math.ceil((queue - band) * tuning.excess_cut_share)
        limit, slow_start, case = min(limit, in_flight - excess), False, Case.ABOVE_BAND
    elif queue < band and acked > 0:
        if slow_start or _far_below_peak(limit, peak, config):
            room = _kv_room(reading, config)
            limit, case = limit + (limit if room is None else min(limit, room)), Case.SLOW_START
        else:
            limit += min(acked, max(1, math.ceil(limit * tuning.additive_growth_fraction)))
            case = Case.ADDITIVE
    bound = config.page_latency_limit_seconds
    if latency is not None and bound is not None and latency > bound and drain > 0.0:
        ceiling = min(c.limit, math.ceil(drain * bound))
        if limit > ceiling:
            limit, slow_start = ceiling, False
    return _clamped(replace(c, case=case), limit, slow_start, config)


def _taking_in(reading: Reading, running_seen: int, config: GateConfig) -> bool:
    """The engine is taking its queue in: running grew, and the cache has room."""
    return reading.running > running_seen and reading.kv_usage <= config.kv_cache_ceiling


def _far_below_peak(limit: int, peak: float, config: GateConfig) -> bool:
    return limit < peak * config.tuning.far_below_share


def _first_estimate(c: Concurrency, reading: Reading, config: GateConfig) -> Concurrency:
    if c.estimated:
        return c
    c = replace(c, estimated=True)
    if reading.kv_max_concurrency is None:
        return c
    held = math.floor(reading.kv_max_concurrency * config.kv_cache_ceiling + SLACK)
    return c if held <= c.limit else _clamped(c, held, c.slow_start, config)


def _kv_room(reading: Reading, config: GateConfig) -> int | None:
    """Requests the cache could still take at the current KV per request (at least 1);
    None below kv_signal_floor or with nothing running."""
    kv, running = reading.kv_usage, reading.running
    if kv <= config.tuning.kv_signal_floor or running <= 0:
        return None
    return max(1, math.floor(running * (config.kv_cache_ceiling - kv) / kv + SLACK))


def room(c: Concurrency, in_flight: int, config: GateConfig) -> int:
    """Pages C and the hard cap still let in flight (negative after a cut)."""
    return min(c.limit, config.max_in_flight_pages) - in_flight


def _clamped(c: Concurrency, limit: int, slow_start: bool, config: GateConfig) -> Concurrency:
    limit = min(config.max_in_flight_pages, max(config.concurrency_start, limit))
    return replace(c, limit=limit, slow_start=slow_start)


# ------------------------------------------------------------------ the token bucket


@dataclass(frozen=True, slots=True)
class Bucket:
    tokens: float                                # level at `at`
    at: float


def pace_rate(rates: Rates, config: GateConfig) -> float:
    """The bucket's refill rate in pages/s."""
    return max(config.tuning.pace_min_rate, config.tuning.pace_gain * _signals.pace_drain(rates))


def _capacity(refill: float, config: GateConfig) -> float:
    return max(float(config.concurrency_start), refill * config.poll_interval_seconds)


def full_bucket(now: float, config: GateConfig) -> Bucket:
    return Bucket(_capacity(config.tuning.pace_min_rate, config), now)


def _level(bucket: Bucket, now: float, refill: float, config: GateConfig) -> float:
    return min(_capacity(refill, config), bucket.tokens + refill * max(0.0, now - bucket.at))


def whole_tokens(bucket: Bucket, now: float, refill: float, config: GateConfig) -> int:
    return math.floor(_level(bucket, now, refill, config) + SLACK)


def next_token_at(bucket: Bucket, now: float, refill: float, config: GateConfig) -> float:
    """When the bucket next holds a whole token."""
    missing = 1.0 - _level(bucket, now, refill, config)
    return now if missing <= SLACK else now + missing / refill


def take(bucket: Bucket, now: float, refill: float, config: GateConfig) -> Bucket:
    """One page goes in flight."""
    return Bucket(max(0.0, _level(bucket, now, refill, config) - 1.0), now)
