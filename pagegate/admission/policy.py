"""The admission policy: pure decisions from server readings, outcomes and time.

Everything here is a function of (state, input, now, config) and returns a new frozen
state or a decision, like a Netflix concurrency-limits `Limit`: no asyncio, no I/O, no
clock reads. The runtime `Gate` (gate.py) feeds it and enforces what it says.

Two levels, because they answer different questions:

UNIT admission, "how much work may the pipeline promise the server?"
    A release grants one *unit* of page credits. Waiting pages take credits in FIFO
    order, whatever group they belong to, so a unit may span small groups. The four
    user rules (olmOCR's defaults) govern releases:
      1. serialized: one decision at a time, at most one unit per decision, never two
         releases within one cooldown (the runtime has one decision loop);
      2. peak ratio: no release while the server's waiting count is above
         peak_ratio x peak, where the peak is the decayed maximum of *running*
         requests (the batch the server has shown it can hold);
      3. cooldown: at least cooldown_seconds between releases; the first release
         happens as soon as the server is ready and idle;
      4. progress: no release until a page of the previous unit has completed.
    Releases also need a good, fresh reading (a failed or stale scrape freezes them).
    A unit covers the room the page level has (C minus what is in flight or credited)
    plus service at the estimated rate until the next release can come, with a margin:
    one cooldown, plus the recent time pages sat at the gate without credits before a
    release (the ratio and progress rules can hold a release past the cooldown), so a
    unit outlasts the gap even on a fast GPU or a small server. The rate is the larger
    of the measured drain and Little's law (in flight / mean page latency): the drain
    lags by a page latency while the gate ramps up, Little's law does not. A unit that
    ran dry while the server had room doubles the next one.

PAGE pacing, "how many credited pages may be on the wire right now?"
    A credited page goes in flight only while in_flight < C (an adaptive concurrency
    limit), in_flight < max_in_flight_pages, and a token bucket has a token (so
    pages reach the server at about the rate it drains them, never as one burst).
    C is steered on engine signals, not end-to-end latency: the controller keeps the
    server's queue (waiting plus our requests stuck before the engine) in a small
    positive band. It grows (slow start, then additively) while the queue is below the
    band, shrinks in proportion to the excess above it, aims for an empty queue while
    KV usage is above the ceiling, and backs off multiplicatively on preemptions and
    on CAPACITY outcomes (503/429/refused/timeouts). A queue while the batch is still
    growing and the cache mostly empty is the engine's prefill rate, so it does not
    end slow start; below half the peak, growth is multiplicative again. The server's
    metrics are the truth, so several flow runs sharing one server all back off
    together. The bucket refills at a multiple of the drain seen so far, with a floor.

A page credit is spent when the page goes in flight. A page that comes back CAPACITY or
CANCELLED did not use the server, so its credit returns to the pool (a retry can take
it); OK and CONTENT pages count as completed (progress).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

from pagegate.admission.base import Outcome
from pagegate.server.metrics import Reading


@dataclass(frozen=True, slots=True, kw_only=True)
class GateConfig:
    """Every knob of the gate. Defaults are olmOCR's where olmOCR had one.

    The reason for each default is in docs/admission.md.
    """

    # The four user rules (olmOCR's values).
    peak_ratio: float = 0.1
    cooldown_seconds: float = 30.0
    require_progress: bool = True
    # Hard bounds.
    max_in_flight_pages: int = 1600
    kv_cache_ceiling: float = 0.9
    # Readings.
    poll_interval_seconds: float = 1.0
    stale_after_seconds: float = 5.0
    scrape_timeout_seconds: float = 4.0
    peak_half_life_seconds: float = 600.0
    stall_after_seconds: float | None = 60.0
    unavailable_after_seconds: float | None = 900.0
    # Unit sizing.
    first_unit_pages: int = 1024
    min_unit_pages: int = 16
    max_unit_pages: int = 3200
    unit_margin: float = 1.5
    refill_fraction: float = 0.25
    drain_window_seconds: float = 60.0
    # Page pacing (the adaptive concurrency limit C and the token bucket).
    initial_concurrency: int = 16
    min_concurrency: int = 4
    waiting_band_fraction: float = 0.05
    waiting_band_min: float = 2.0
    additive_growth_fraction: float = 0.05
    preemption_backoff: float = 0.9
    capacity_backoff: float = 0.5
    frontend_gap_tolerance: int = 4
    pace_min_rate: float = 10.0
    pace_gain: float = 2.0

    def __post_init__(self) -> None:
        problems: list[str] = []

        def need(ok: bool, message: str) -> None:
            if not ok:
                problems.append(message)

        need(0.0 <= self.peak_ratio <= 1.0, "peak_ratio must be in [0, 1]")
        need(self.cooldown_seconds >= 0.0, "cooldown_seconds must be >= 0")
        need(self.max_in_flight_pages >= 1, "max_in_flight_pages must be >= 1")
        need(0.0 < self.kv_cache_ceiling <= 1.0, "kv_cache_ceiling must be in (0, 1]")
        need(self.poll_interval_seconds > 0.0, "poll_interval_seconds must be > 0")
        need(
            self.stale_after_seconds > self.poll_interval_seconds,
            "stale_after_seconds must exceed poll_interval_seconds",
        )
        need(self.scrape_timeout_seconds > 0.0, "scrape_timeout_seconds must be > 0")
        need(self.peak_half_life_seconds > 0.0, "peak_half_life_seconds must be > 0")
        need(
            self.stall_after_seconds is None or self.stall_after_seconds > 0.0,
            "stall_after_seconds must be > 0 or None",
        )
        need(
            self.unavailable_after_seconds is None or self.unavailable_after_seconds > 0.0,
            "unavailable_after_seconds must be > 0 or None",
        )
        need(self.min_unit_pages >= 1, "min_unit_pages must be >= 1")
        need(self.max_unit_pages >= self.min_unit_pages, "max_unit_pages must be >= min_unit_pages")
        need(self.first_unit_pages >= 1, "first_unit_pages must be >= 1")
        need(self.unit_margin >= 1.0, "unit_margin must be >= 1")
        need(0.0 <= self.refill_fraction < 1.0, "refill_fraction must be in [0, 1)")
        need(self.drain_window_seconds > 0.0, "drain_window_seconds must be > 0")
        need(self.min_concurrency >= 1, "min_concurrency must be >= 1")
        need(
            self.initial_concurrency >= self.min_concurrency,
            "initial_concurrency must be >= min_concurrency",
        )
        need(self.waiting_band_fraction >= 0.0, "waiting_band_fraction must be >= 0")
        need(self.waiting_band_min >= 0.0, "waiting_band_min must be >= 0")
        need(self.additive_growth_fraction >= 0.0, "additive_growth_fraction must be >= 0")
        need(0.0 < self.preemption_backoff < 1.0, "preemption_backoff must be in (0, 1)")
        need(0.0 < self.capacity_backoff < 1.0, "capacity_backoff must be in (0, 1)")
        need(self.frontend_gap_tolerance >= 0, "frontend_gap_tolerance must be >= 0")
        need(self.pace_min_rate > 0.0, "pace_min_rate must be > 0")
        need(self.pace_gain >= 1.0, "pace_gain must be >= 1")
        if problems:
            raise ValueError("invalid GateConfig: " + "; ".join(problems))

    @property
    def concurrency_floor(self) -> int:
        """The lowest C; never above the hard cap, so a small cap needs no other edits."""
        return min(self.min_concurrency, self.max_in_flight_pages)

    @property
    def concurrency_start(self) -> int:
        return min(self.initial_concurrency, self.max_in_flight_pages)


class Reason(enum.StrEnum):
    """Why a release happened or was held back; also why page dispatch is paused."""

    RELEASED = "released"
    NO_READING = "no_reading"          # no scrape has answered yet
    SCRAPE_FAILED = "scrape_failed"    # the latest scrape failed (missing reading)
    STALE = "stale"                    # the newest reading is older than stale_after
    UNHEALTHY = "unhealthy"            # the source reported the server unfit
    STALLED = "stalled"                # work on the server, but no token generated for a while
    NO_DEMAND = "no_demand"            # every waiting page already has a credit
    CREDITS_LEFT = "credits_left"      # the last unit is not used up yet
    COOLDOWN = "cooldown"              # rule 3
    PROGRESS = "progress"              # rule 4
    PEAK_RATIO = "peak_ratio"          # rule 2


@dataclass(frozen=True, slots=True)
class ReleaseDecision:
    """The outcome of one release decision: release `pages` credits, or hold for `reason`.

    `recheck_at` is when the answer can change with time alone (the end of a cooldown);
    None means only a new event (reading, outcome, waiter) can change it.
    """

    release: bool
    pages: int
    reason: Reason
    recheck_at: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GateState:
    """Everything the policy remembers. Build the first one with `initial_state`."""

    started_at: float
    limit: int                                   # C, the adaptive concurrency limit
    tokens: float                                # pacing bucket level at `tokens_at`
    tokens_at: float
    reading: Reading | None = None               # the newest good reading
    last_scrape_ok: bool = False                 # False after a failed scrape
    last_usable_at: float | None = None          # newest reading that allowed admission
    peak: float = 0.0                            # decayed max of running requests
    queue: float = 0.0                           # waiting + frontend backlog, last reading
    slow_start: bool = True
    cut_running: int = 0                         # running at the last queue cut
    last_backoff_at: float | None = None
    preemptions_seen: float | None = None
    generation_seen: float | None = None
    generation_moved_at: float | None = None
    queued: int = 0                              # pages waiting at the gate
    in_flight: int = 0                           # pages holding a permit
    credits: tuple[tuple[int, int], ...] = ()    # (unit id, unspent credits), oldest first
    units_released: int = 0                      # also the id of the newest unit
    last_release_at: float | None = None
    last_unit_pages: int = 0
    unit_completed: int = 0                      # completed pages of the newest unit
    starved: bool = False                        # ran dry while the server had room
    dry_since: float | None = None               # credits ran out with pages queued
    dry_seconds: float = 0.0                     # decayed max of dry gaps before releases
    admitted_total: int = 0
    completed_total: int = 0
    drain_num: float = 0.0                       # decayed completions
    drain_den: float = 0.0                       # decayed busy seconds
    drain_at: float | None = None
    drain_completed: int = 0
    latency_num: float = 0.0                     # decayed sum of page latencies
    latency_den: float = 0.0                     # decayed count of timed completions
    latency_at: float | None = None

    @property
    def open_credits(self) -> int:
        return sum(n for _, n in self.credits)


def initial_state(now: float, config: GateConfig) -> GateState:
    return GateState(
        started_at=now,
        limit=config.concurrency_start,
        tokens=_bucket_size(config.pace_min_rate, config),
        tokens_at=now,
    )


# ---------------------------------------------------------------------------- readings


def observe(
    state: GateState,
    reading: Reading,
    config: GateConfig,
    *,
    in_flight_at_scrape: int | None = None,
) -> GateState:
    """Fold a good scrape into the state: peak, stall and drain tracking, and C.

    `in_flight_at_scrape` is our in-flight count when the scrape started; it measures
    the frontend gap (our requests the engine does not count yet) more fairly than the
    count after the scrape, which may include pages sent while it was in transit.
    """
    previous = state.reading
    if previous is not None and reading.at < previous.at:
        return state  # out of order: keep the newer reading

    peak = float(reading.running)
    if previous is not None:
        decay = 0.5 ** ((reading.at - previous.at) / config.peak_half_life_seconds)
        peak = max(peak, state.peak * decay)

    preempted = (
        reading.preemptions_total is not None
        and state.preemptions_seen is not None
        and reading.preemptions_total > state.preemptions_seen
    )

    generation_seen, generation_moved_at = _track_generation(state, reading)
    state = replace(
        state,
        reading=reading,
        last_scrape_ok=True,
        peak=peak,
        preemptions_seen=reading.preemptions_total,
        generation_seen=generation_seen,
        generation_moved_at=generation_moved_at,
    )
    state = _update_drain(state, reading.at, config)

    in_flight = state.in_flight if in_flight_at_scrape is None else in_flight_at_scrape
    gap = in_flight - (reading.running + reading.waiting)
    queue = reading.waiting + max(0, gap - config.frontend_gap_tolerance)
    state = replace(state, queue=float(queue))

    if not reading.healthy or _stalled(state, config):
        return state  # not usable: C stays frozen, last_usable_at does not move
    state = replace(state, last_usable_at=reading.at)
    state = _steer_limit(state, reading, float(queue), preempted, config)

    low, _ = waiting_band(state, config)
    pressured = reading.kv_usage > config.kv_cache_ceiling
    open_credits = state.open_credits
    if state.queued > 0 and open_credits == 0 and queue < low and not pressured:
        state = replace(state, starved=True)
    return _mark_dry(state, reading.at)


def _mark_dry(state: GateState, now: float) -> GateState:
    """Start (or stop) the clock of pages queued at the gate with no credit to take."""
    dry = state.queued > 0 and state.open_credits == 0
    if dry and state.dry_since is None:
        return replace(state, dry_since=now)
    if not dry and state.dry_since is not None:
        return replace(state, dry_since=None)
    return state


def observe_failure(state: GateState, at: float, config: GateConfig) -> GateState:
    """A scrape failed or timed out: a missing reading, never a zero one."""
    return replace(state, last_scrape_ok=False)


def waiting_band(state: GateState, config: GateConfig) -> tuple[float, float]:
    """(low, high) bounds of the server queue the pacing controller aims for.

    high grows with the demonstrated batch (peak running) but stays below the peak
    ratio by default (0.05 vs 0.1), so a queue inside the band never blocks releases.
    """
    high = max(config.waiting_band_min, config.waiting_band_fraction * state.peak)
    return high / 4.0, high


def _track_generation(state: GateState, reading: Reading) -> tuple[float | None, float | None]:
    """Remember when generated tokens last moved (or the server was idle)."""
    generated = reading.generation_tokens_total
    if generated is None:
        return None, None
    idle = reading.running + reading.waiting == 0
    if state.generation_seen is None or generated != state.generation_seen or idle:
        return generated, reading.at
    return generated, state.generation_moved_at


def _stalled(state: GateState, config: GateConfig) -> bool:
    """The engine holds work but has generated nothing for stall_after seconds (hung)."""
    if config.stall_after_seconds is None or state.reading is None:
        return False
    if state.generation_moved_at is None:
        return False
    return state.reading.at - state.generation_moved_at > config.stall_after_seconds


def _update_drain(state: GateState, at: float, config: GateConfig) -> GateState:
    """Exponentially weighted completions per busy second.

    Sampling starts with the first completion, so the first pages' latency is not
    mistaken for a slow server; idle stretches (nothing in flight, nothing finished)
    are left out, so a pause between groups does not shrink the next unit.
    """
    if state.drain_at is None:
        return replace(state, drain_at=at, drain_completed=state.completed_total)
    dt = at - state.drain_at
    finished = state.completed_total - state.drain_completed
    num, den = state.drain_num, state.drain_den
    if dt > 0 and state.completed_total > 0 and (finished > 0 or state.in_flight > 0):
        decay = math.exp(-dt / config.drain_window_seconds)
        num = num * decay + finished
        den = den * decay + dt
    return replace(
        state, drain_num=num, drain_den=den, drain_at=at, drain_completed=state.completed_total
    )


def drain_rate(state: GateState, config: GateConfig) -> float | None:
    """Our pages completed per second while busy; None until half a window of evidence."""
    if state.drain_den < config.drain_window_seconds / 2.0:
        return None
    return state.drain_num / state.drain_den


def _update_latency(state: GateState, latency: float, now: float, config: GateConfig) -> GateState:
    """Fold one completed page's time in flight into a decayed mean (same window as drain)."""
    num, den = state.latency_num, state.latency_den
    if state.latency_at is not None and now > state.latency_at:
        decay = math.exp(-(now - state.latency_at) / config.drain_window_seconds)
        num, den = num * decay, den * decay
    return replace(
        state, latency_num=num + max(0.0, latency), latency_den=den + 1.0, latency_at=now
    )


def mean_latency(state: GateState) -> float | None:
    """Mean time in flight of recently completed pages; None before the first one."""
    if state.latency_den <= 0.0:
        return None
    return state.latency_num / state.latency_den


_LATENCY_FLOOR = 1e-3
"""Seconds; keeps Little's law finite when a clock does not move between send and reply."""


def service_rate(state: GateState, config: GateConfig) -> float | None:
    """Pages per second the server gets through for us: the best evidence we have.

    The larger of the measured drain and Little's law (throughput = pages in flight /
    mean time in flight). While the gate ramps up, completions trail admissions by a
    page latency, so the drain under-reads by up to the ramp's factor; Little's law
    uses what is in flight now. Its early bias is upwards (short pages finish first),
    which only makes units larger: the page level, not the unit, protects the server.
    None until a page has completed.
    """
    rates: list[float] = []
    drained = drain_rate(state, config)
    if drained is not None:
        rates.append(drained)
    latency = mean_latency(state)
    if latency is not None:
        rates.append(state.in_flight / max(latency, _LATENCY_FLOOR))
    return max(rates) if rates else None


_KV_SIGNAL_FLOOR = 0.05
"""Below 5 % usage, KV per running request is too noisy to project the cache's room."""


def _steer_limit(
    state: GateState, reading: Reading, queue: float, preempted: bool, config: GateConfig
) -> GateState:
    """One control step of C on a usable reading (see the module docstring)."""
    floor, cap = config.concurrency_floor, config.max_in_flight_pages
    limit = state.limit
    low, high = waiting_band(state, config)
    pressured = reading.kv_usage > config.kv_cache_ceiling
    if pressured:
        high = 0.0  # vLLM can only admit as blocks free: a queue only feeds preemption

    # Cuts are taken from what is in flight, not from C: while a cut waits for pages
    # to finish, the next reading computes the same target instead of cutting again.
    in_flight = state.in_flight
    if preempted:
        limit = min(limit, math.floor(in_flight * config.preemption_backoff))
        return _with_limit(state, limit, floor, cap, slow_start=False, backoff_at=reading.at)
    if queue > high:
        excess = math.ceil((queue - high) / 2.0)  # halve the excess: other tenants cut too
        limit = min(limit, in_flight - excess)
        # A queue while the batch is still growing and the cache is mostly empty is the
        # engine's prefill rate (one chunk budget per step), not a full server: cut, but
        # keep growing fast. Once running stops growing (slots or KV bind), it ends.
        ramping = (
            state.slow_start
            and reading.kv_usage < config.kv_cache_ceiling / 2.0
            and reading.running > state.cut_running
        )
        state = replace(state, cut_running=reading.running)
        return _with_limit(state, limit, floor, cap, slow_start=ramping)
    limit_bound = state.in_flight * 2 >= limit
    # While the cache is under half the ceiling, a queue inside the band is the prefill
    # backlog of a batch that is still filling up: keep growing until it leaves the band.
    grow_below = high if reading.kv_usage < config.kv_cache_ceiling / 2.0 else low
    if queue < grow_below and not pressured and limit_bound:
        # Far below the batch the server has recently held (a collapse after a burst
        # of bad signals, e.g. stale scrapes), regrow like slow start up to half the
        # peak, as TCP restarts slow start up to half its old window: +5 % from the
        # floor would take a minute to refill a 4090.
        if state.slow_start or limit < state.peak / 2.0:
            step = limit
            if reading.kv_usage > _KV_SIGNAL_FLOOR and reading.running > 0:
                room = reading.running * (config.kv_cache_ceiling - reading.kv_usage)
                step = min(step, max(1, math.floor(room / reading.kv_usage + 1e-9)))
        else:
            step = max(1, math.ceil(limit * config.additive_growth_fraction))
        return _with_limit(state, limit + step, floor, cap, slow_start=state.slow_start)
    return state


def _with_limit(
    state: GateState,
    limit: int,
    floor: int,
    cap: int,
    *,
    slow_start: bool,
    backoff_at: float | None = None,
) -> GateState:
    limit = min(cap, max(floor, limit))
    last_backoff_at = state.last_backoff_at if backoff_at is None else backoff_at
    return replace(state, limit=limit, slow_start=slow_start, last_backoff_at=last_backoff_at)


# ---------------------------------------------------------------------------- waiters


def add_waiter(state: GateState) -> GateState:
    return replace(state, queued=state.queued + 1)


def remove_waiter(state: GateState) -> GateState:
    """A waiting page gave up before it was admitted."""
    if state.queued <= 0:
        raise ValueError("no waiter to remove")
    state = replace(state, queued=state.queued - 1)
    return state if state.queued > 0 else replace(state, dry_since=None)


# ---------------------------------------------------------------------------- releases


def pause_reason(state: GateState, now: float, config: GateConfig) -> Reason | None:
    """Why page dispatch is paused now, or None when pages may flow.

    Dispatch tolerates one failed scrape as long as the newest good reading is fresh;
    releases are stricter (see `decide_release`).
    """
    reading = state.reading
    if reading is None:
        return Reason.NO_READING
    if now - reading.at > config.stale_after_seconds:
        return Reason.STALE
    if not reading.healthy:
        return Reason.UNHEALTHY
    if _stalled(state, config):
        return Reason.STALLED
    return None


def page_room(state: GateState, config: GateConfig) -> int:
    """Pages the page level could put in flight now that no credit covers yet."""
    room = min(state.limit, config.max_in_flight_pages) - state.in_flight
    return max(0, room - state.open_credits)


def unit_size(state: GateState, config: GateConfig, now: float | None = None) -> int:
    """Pages in the next unit: the page level's room plus service until the next release.

    The next release comes one cooldown later at the earliest, and later still when
    the peak-ratio or progress rule holds it; `dry_seconds` is how long pages recently
    sat at the gate without credits before a release came, so the unit covers that
    too. (On a 4-slot server the ratio rule needs a reading of 0 waiting, which with
    vLLM's one-step gauge lag comes seconds after the cooldown.) With `now`, a dry gap
    still open counts at once. Before any page has completed there is nothing to size
    from, so the unit is `first_unit_pages` (the page level keeps the server safe
    meanwhile).
    """
    rate = service_rate(state, config)
    if rate is None:
        pages = config.first_unit_pages
    else:
        dry = state.dry_seconds if now is None else _dry_gap(state, now, config)
        interval = config.cooldown_seconds + dry
        pages = math.ceil(page_room(state, config) + rate * interval * config.unit_margin)
    if state.starved and state.last_unit_pages > 0:
        pages = max(pages, 2 * state.last_unit_pages)
    return min(config.max_unit_pages, max(config.min_unit_pages, pages))


def decide_release(state: GateState, now: float, config: GateConfig) -> ReleaseDecision:
    """The one release decision: release a unit now, or the first rule that holds it."""

    def hold(reason: Reason, recheck_at: float | None = None) -> ReleaseDecision:
        return ReleaseDecision(False, 0, reason, recheck_at)

    reading = state.reading
    if reading is None:
        return hold(Reason.NO_READING)
    if not state.last_scrape_ok:
        return hold(Reason.SCRAPE_FAILED)
    paused = pause_reason(state, now, config)
    if paused is not None:
        return hold(paused)
    open_credits = state.open_credits
    if state.queued <= open_credits:
        return hold(Reason.NO_DEMAND)
    room = min(state.limit, config.max_in_flight_pages) - state.in_flight
    if open_credits > config.refill_fraction * state.last_unit_pages and open_credits >= room:
        return hold(Reason.CREDITS_LEFT)  # and the page level could not use more now
    if state.last_release_at is not None:
        ready_at = state.last_release_at + config.cooldown_seconds
        if now < ready_at:
            return hold(Reason.COOLDOWN, ready_at)
        if config.require_progress and state.unit_completed == 0:
            return hold(Reason.PROGRESS)
    if reading.waiting > config.peak_ratio * state.peak:
        return hold(Reason.PEAK_RATIO)
    return ReleaseDecision(True, unit_size(state, config, now), Reason.RELEASED)


def apply_release(
    state: GateState, decision: ReleaseDecision, now: float, config: GateConfig
) -> GateState:
    """Grant the unit a `decide_release` call returned."""
    if not decision.release or decision.pages < 1:
        raise ValueError("apply_release needs a releasing decision")
    unit_id = state.units_released + 1
    return replace(
        state,
        credits=(*state.credits, (unit_id, decision.pages)),
        units_released=unit_id,
        last_release_at=now,
        last_unit_pages=decision.pages,
        unit_completed=0,
        starved=False,
        dry_since=None,
        dry_seconds=_dry_gap(state, now, config),
    )


def _dry_gap(state: GateState, now: float, config: GateConfig) -> float:
    """The dry gap to size the next units for: the newest one, or half the last estimate.

    Halving per release forgets a gap that no longer happens within a few units. The
    gap counts at most one cooldown, so an outage (the gate paused for minutes with
    pages queued) does not turn into one enormous unit after it.
    """
    if state.dry_since is None or state.last_release_at is None:
        gap = 0.0  # before the first release nothing ran dry: the gate had not started
    else:
        gap = max(0.0, now - state.dry_since)
    return min(config.cooldown_seconds, max(gap, 0.5 * state.dry_seconds))


# ---------------------------------------------------------------------------- pages


def pace_rate(state: GateState, config: GateConfig) -> float:
    """Token refill rate (pages/s): a multiple of the drain so far, with a floor.

    Pacing takes the drain from the first completions on, without waiting for the half
    window that unit sizing needs: a fast server (27 pages/s) shows its rate within a
    second, and the floor must not cap it for half a minute. Early on a slow server the
    drain under-reads, and the floor (above a single GPU's page rate) applies. Little's
    law is not used here: with few completions its latency is a handful of short pages
    while what is in flight keeps growing, so it would feed its own growth.
    """
    drained = state.drain_num / state.drain_den if state.drain_den > 0.0 else 0.0
    return max(config.pace_min_rate, config.pace_gain * drained)


_TOKEN_EPSILON = 1e-9
"""Refill arithmetic may leave 0.9999999 of a token; count it as a whole one."""


def _bucket_size(rate: float, config: GateConfig) -> float:
    """One poll interval's worth of tokens, and never fewer than C's floor.

    With a short poll (0.1 s against a tiny server) one poll's worth is a single token,
    and every tick the decision loop wakes late (a busy event loop, a CPU shared with
    the engine) throws the refill away: the bucket, not C, then capped the real engine
    at half its rate. C never goes below its floor, so letting that many pages through
    at once is never a burst the page level would not allow anyway.
    """
    return max(float(config.concurrency_floor), rate * config.poll_interval_seconds)


def _tokens(state: GateState, now: float, config: GateConfig) -> float:
    rate = pace_rate(state, config)
    elapsed = max(0.0, now - state.tokens_at)
    return min(_bucket_size(rate, config), state.tokens + rate * elapsed)


def page_allowance(state: GateState, now: float, config: GateConfig) -> int:
    """How many waiting, credited pages may go in flight now."""
    if pause_reason(state, now, config) is not None:
        return 0
    room = min(state.limit, config.max_in_flight_pages) - state.in_flight
    tokens = math.floor(_tokens(state, now, config) + _TOKEN_EPSILON)
    allowed = min(state.queued, state.open_credits, room, tokens)
    return max(0, allowed)


def next_token_at(state: GateState, now: float, config: GateConfig) -> float:
    """When the pacing bucket next holds a whole token."""
    missing = 1.0 - _tokens(state, now, config)
    if missing <= _TOKEN_EPSILON:
        return now
    return now + missing / pace_rate(state, config)


def dispatch(state: GateState, now: float, config: GateConfig) -> tuple[GateState, int]:
    """One credited page goes in flight; returns the id of the unit whose credit it spent."""
    if page_allowance(state, now, config) < 1:
        raise ValueError("no page may be dispatched now")
    (unit_id, left), *rest = state.credits
    credits = tuple(rest) if left == 1 else ((unit_id, left - 1), *rest)
    state = replace(
        state,
        credits=credits,
        tokens=max(0.0, _tokens(state, now, config) - 1.0),
        tokens_at=now,
        queued=state.queued - 1,
        in_flight=state.in_flight + 1,
        admitted_total=state.admitted_total + 1,
    )
    return _mark_dry(state, now), unit_id


def on_outcome(
    state: GateState,
    outcome: Outcome,
    unit_id: int,
    now: float,
    config: GateConfig,
    *,
    dispatched_at: float | None = None,
) -> GateState:
    """A page gave its permit back. Pages the server did not finish return their credit.

    `dispatched_at` (when the page went in flight) feeds the mean page latency that
    Little's law needs; without it the service rate rests on the drain alone.
    """
    if state.in_flight <= 0:
        raise ValueError("no page in flight")
    state = replace(state, in_flight=state.in_flight - 1)
    if outcome.server_finished:
        unit_completed = state.unit_completed + (unit_id == state.units_released)
        state = replace(
            state, completed_total=state.completed_total + 1, unit_completed=unit_completed
        )
        if dispatched_at is not None:
            state = _update_latency(state, now - dispatched_at, now, config)
        return state
    state = replace(state, credits=_return_credit(state.credits, unit_id), dry_since=None)
    if outcome is Outcome.CAPACITY:
        recent = (
            state.last_backoff_at is not None
            and now - state.last_backoff_at < config.poll_interval_seconds
        )
        if not recent:  # one backoff per poll interval: a wave of timeouts is one signal
            limit = min(state.limit, math.floor((state.in_flight + 1) * config.capacity_backoff))
            state = _with_limit(
                state,
                limit,
                config.concurrency_floor,
                config.max_in_flight_pages,
                slow_start=False,
                backoff_at=now,
            )
    return state


def _return_credit(credits: tuple[tuple[int, int], ...], unit_id: int) -> tuple[tuple[int, int], ...]:
    pool = dict(credits)
    pool[unit_id] = pool.get(unit_id, 0) + 1
    return tuple(sorted(pool.items()))


# ---------------------------------------------------------------------------- timers


def unavailable(state: GateState, now: float, config: GateConfig) -> bool:
    """Paused for longer than unavailable_after: waiting pages should fail, not hang."""
    if config.unavailable_after_seconds is None:
        return False
    if pause_reason(state, now, config) is None:
        return False
    since = state.last_usable_at if state.last_usable_at is not None else state.started_at
    return now - since >= config.unavailable_after_seconds


def next_wake_at(
    state: GateState, decision: ReleaseDecision, now: float, config: GateConfig
) -> float | None:
    """The next time the gate must look again even if no event arrives."""
    times: list[float] = []
    if decision.recheck_at is not None:
        times.append(decision.recheck_at)
    if pause_reason(state, now, config) is None:
        room = min(state.limit, config.max_in_flight_pages) - state.in_flight
        if min(state.queued, state.open_credits, room) > 0:
            times.append(next_token_at(state, now, config))
    elif state.queued > 0 and config.unavailable_after_seconds is not None:
        since = state.last_usable_at if state.last_usable_at is not None else state.started_at
        times.append(since + config.unavailable_after_seconds)
    return min(times) if times else None
