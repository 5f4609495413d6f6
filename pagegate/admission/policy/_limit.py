"""What may go: units of page credits (releases), the adaptive limit C (pages in flight) and
the token bucket (their pace). A page spends its oldest unit's credit, and gets it back if
the server did not finish it. C steers the server's queue to a small band (`update`)."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

from pagegate.admission.policy._config import SLACK, GateConfig
from pagegate.server.metrics import Reading


class Reason(enum.StrEnum):
    RELEASED = "released"
    NO_READING = "no_reading"          # no scrape has answered yet
    STALE = "stale"                    # the newest reading is older than stale_after
    UNHEALTHY = "unhealthy"            # the server reported itself unfit
    STALLED = "stalled"                # work on the server, no token generated for a while
    NO_DEMAND = "no_demand"            # every waiting page already has a credit
    CREDITS_LEFT = "credits_left"      # the last unit is not used up yet
    COOLDOWN = "cooldown"              # rule 3
    PROGRESS = "progress"              # rule 4
    PEAK_RATIO = "peak_ratio"          # rule 2


@dataclass(frozen=True, slots=True)
class ReleaseDecision:
    """Release `pages` credits, or hold for `reason` (until `recheck_at`, if time alone ends it)."""

    reason: Reason
    pages: int = 0
    recheck_at: float | None = None

    @property
    def release(self) -> bool:
        return self.reason is Reason.RELEASED


@dataclass(frozen=True, slots=True)
class Units:
    credits: tuple[tuple[int, int], ...] = ()    # (unit id, unspent credits), oldest first
    units_released: int = 0                      # also the id of the newest unit
    last_release_at: float | None = None
    unit_completed: int = 0                      # completed pages of the newest unit

    @property
    def open_credits(self) -> int:
        return sum(n for _, n in self.credits)

    def grant(self, pages: int, now: float) -> Units:
        unit_id = self.units_released + 1
        return Units((*self.credits, (unit_id, pages)), unit_id, now, 0)

    def spend(self) -> tuple[Units, int]:
        """A page goes in flight on the oldest unit's credit; returns that unit's id."""
        (unit_id, left), *rest = self.credits
        credits = tuple(rest) if left == 1 else ((unit_id, left - 1), *rest)
        return replace(self, credits=credits), unit_id

    def give_back(self, unit_id: int) -> Units:
        pool = dict(self.credits)
        pool[unit_id] = pool.get(unit_id, 0) + 1
        return replace(self, credits=tuple(sorted(pool.items())))

    def completed(self, unit_id: int) -> Units:
        """A page the server finished: progress, if it belongs to the newest unit."""
        newest = unit_id == self.units_released
        return replace(self, unit_completed=self.unit_completed + newest)


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

    def room(self, in_flight: int, config: GateConfig) -> int:
        """Pages C and the hard cap still let in flight (negative after a cut)."""
        return min(self.limit, config.max_in_flight_pages) - in_flight

    def clamped(self, limit: int, slow_start: bool, config: GateConfig) -> Concurrency:
        limit = min(config.max_in_flight_pages, max(config.concurrency_start, limit))
        return replace(self, limit=limit, slow_start=slow_start)

    def update(
        self, reading: Reading, *, queue: float, in_flight: int, preempted: bool,
        band: float, drain: float, latency: float | None, config: GateConfig,
    ) -> Concurrency:
        """C on a usable reading; n = in flight, q = queue, acked = pages back since the last
        reading, band the waiting band (0 while KV use > kv_cache_ceiling), taking in = running
        grew since the last reading and KV use <= kv_cache_ceiling:

        C  = max(C, floor(kv_max_concurrency x kv_cache_ceiling))   first reading only
        PREEMPTED   a preemption:            C' = min(C, floor(preemption_backoff x n))
        ABOVE_BAND  q > band, not taking in: C' = min(C, n - ceil(excess_cut_share x (q - band)))
        SLOW_START  q < band, acked > 0, in slow start:
                    C' = C + min(C, KV room), C' = 2C where KV use < kv_signal_floor
        ADDITIVE    q < band, acked > 0:
                    C' = C + min(acked, max(1, ceil(additive_growth_fraction x C)))
        HOLD        otherwise:           C' = C
        then, while the mean page latency L > page_latency_limit:
        C' = min(C', C, ceil(max(drain, n / L) x limit));
        C' within [initial_concurrency, max_in_flight_pages].
        PREEMPTED, a latency bound that cuts C' and ABOVE_BAND end slow start, ABOVE_BAND only
        when the engine has requests waiting or KV use is past its ceiling.
        """
        c = self._first_estimate(reading, config)
        acked, limit, slow_start, case = c.acked, c.limit, c.slow_start, Case.HOLD
        taking_in = c._taking_in(reading, config)
        c = replace(c, acked=0, running_seen=reading.running)
        pressured = reading.kv_usage > config.kv_cache_ceiling
        band = 0.0 if pressured else band
        if preempted:
            limit = min(limit, math.floor(in_flight * config.tuning.preemption_backoff))
            slow_start, case = False, Case.PREEMPTED
        elif queue > band and not taking_in:
            excess = math.ceil((queue - band) * config.tuning.excess_cut_share)
            # Slow start goes on if the queue is all the front end's and the cache has room.
            slow_start = slow_start and not pressured and reading.waiting == 0
            limit, case = min(limit, in_flight - excess), Case.ABOVE_BAND
        elif queue < band and acked > 0:
            if slow_start:
                room = _kv_room(reading, config)
                limit, case = limit + (limit if room is None else min(limit, room)), Case.SLOW_START
            else:
                growth = max(1, math.ceil(limit * config.tuning.additive_growth_fraction))
                limit, case = limit + min(acked, growth), Case.ADDITIVE
        bound = config.page_latency_limit_seconds
        if latency is not None and bound is not None and latency > bound and drain > 0.0:
            # Little's law: n / L is the rate now, where the drain still lags a ramp.
            ceiling = min(c.limit, math.ceil(max(drain, in_flight / latency) * bound))
            if limit > ceiling:
                limit, slow_start = ceiling, False
        return replace(c, case=case).clamped(limit, slow_start, config)

    def _first_estimate(self, reading: Reading, config: GateConfig) -> Concurrency:
        """On the first reading, C starts at the full-context requests the cache holds."""
        if self.estimated:
            return self
        c = replace(self, estimated=True)
        if reading.kv_max_concurrency is None:
            return c
        held = math.floor(reading.kv_max_concurrency * config.kv_cache_ceiling + SLACK)
        return c if held <= c.limit else c.clamped(held, c.slow_start, config)

    def _taking_in(self, reading: Reading, config: GateConfig) -> bool:
        return reading.running > self.running_seen and reading.kv_usage <= config.kv_cache_ceiling


def _kv_room(reading: Reading, config: GateConfig) -> int | None:
    """Requests the cache could still take at the current KV per request (at least 1);
    None below kv_signal_floor or with nothing running."""
    kv, running = reading.kv_usage, reading.running
    if kv <= config.tuning.kv_signal_floor or running <= 0:
        return None
    return max(1, math.floor(running * (config.kv_cache_ceiling - kv) / kv + SLACK))


@dataclass(frozen=True, slots=True)
class Bucket:
    """Pacing: a page in flight takes a token; the bucket refills at `rate` and holds one
    poll's worth, never fewer than C's start."""

    tokens: float                                # level at `at` (inf: full)
    at: float

    def level(self, now: float, rate: float, config: GateConfig) -> float:
        full = max(float(config.concurrency_start), rate * config.poll_interval_seconds)
        return min(full, self.tokens + rate * max(0.0, now - self.at))

    def whole_tokens(self, now: float, rate: float, config: GateConfig) -> int:
        return math.floor(self.level(now, rate, config) + SLACK)

    def next_token_at(self, now: float, rate: float, config: GateConfig) -> float:
        missing = 1.0 - self.level(now, rate, config)
        return now if missing <= SLACK else now + missing / rate

    def take(self, now: float, rate: float, config: GateConfig) -> Bucket:
        return Bucket(max(0.0, self.level(now, rate, config) - 1.0), now)
