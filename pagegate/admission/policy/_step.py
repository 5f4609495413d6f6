"""The gate's one pure step: fold an event in, make one release decision, admit what may go,
and say when to look again. The runtime (gate.py) calls it on every event and timer."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from pagegate.admission.base import Outcome
from pagegate.admission.policy import _limit, _signals
from pagegate.admission.policy._config import GateConfig
from pagegate.admission.policy._limit import Bucket, Concurrency, Reason, ReleaseDecision, Units
from pagegate.admission.policy._signals import FrontEnd, Rates, Signals
from pagegate.server.metrics import Reading


@dataclass(frozen=True, slots=True, kw_only=True)
class GateState:
    """Everything the policy remembers (the first: `initial_state`), and what it shows."""

    started_at: float
    concurrency: Concurrency
    bucket: Bucket
    signals: Signals = field(default_factory=Signals)
    front: FrontEnd = field(default_factory=FrontEnd)
    rates: Rates = field(default_factory=Rates)
    units: Units = field(default_factory=Units)
    queued: int = 0                              # pages waiting at the gate
    in_flight: int = 0                           # pages holding a permit
    admitted_total: int = 0
    completed_total: int = 0
    balance_at_reading: int = 0                  # completed - admitted at the newest reading
    finished_at: float | None = None             # when the newest page came back finished
    clocked_total: int = 0                       # pages sent on a stale reading, ever

    def drain_rate(self) -> float:
        return _signals.drain(self.rates)

    def mean_latency(self) -> float | None:
        return _signals.mean_latency(self.rates)

    def unit_size(self, config: GateConfig) -> int:
        return _limit.unit_size(self.drain_rate(), config)

    def waiting_band(self, config: GateConfig) -> float:
        return _limit.waiting_band(self.drain_rate(), _signals.transit(self.front), config)

    def frontend_latency(self) -> float | None:
        return _signals.front_latency(self.front)

    def frontend_tolerance(self) -> int | None:
        return _signals.tolerance(self.front, self.drain_rate())


def initial_state(now: float, config: GateConfig) -> GateState:
    return GateState(started_at=now, concurrency=Concurrency(limit=config.concurrency_start),
                     bucket=Bucket.full(now, config))


@dataclass(frozen=True, slots=True)
class Scraped:
    """A good scrape, with our requests on the wire and sent in all when it started."""

    reading: Reading
    in_flight: int | None = None
    sent: int | None = None


@dataclass(frozen=True, slots=True)
class ScrapeFailed:
    """A scrape failed or timed out: a missing reading, never a zero one."""

    error: str = ""


@dataclass(frozen=True, slots=True)
class Joined:
    """A page waits at the gate."""


@dataclass(frozen=True, slots=True)
class Left:
    """Waiting pages gave up (cancelled, or failed as the gate closed)."""

    pages: int = 1


@dataclass(frozen=True, slots=True)
class Finished:
    """A page gave its permit back."""

    outcome: Outcome
    unit_id: int
    dispatched_at: float | None = None


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: the wake the last step asked for."""


Event = Scraped | ScrapeFailed | Joined | Left | Finished | Tick


@dataclass(frozen=True, slots=True)
class Actions:
    decision: ReleaseDecision        # a unit released, or the rule that held it
    admitted: tuple[int, ...]        # unit ids of the pages put in flight, oldest waiter first
    paused: Reason | None            # why pages may not flow now
    unavailable: bool                # paused past unavailable_after: the waiters were failed
    wake_at: float | None            # step again then, even if no event comes


def step(state: GateState, event: Event, now: float, config: GateConfig
         ) -> tuple[GateState, Actions]:
    """Fold `event` in; release at most one unit; fail the waiters once the server has been
    unusable for unavailable_after; put in flight every waiting page that may go now."""
    state = fold(state, event, now, config)
    decision = decide_release(state, now, config)
    if decision.release:
        state = replace(state, units=state.units.grant(decision.pages, now))
    paused = pause_reason(state, now, config)
    failing = state.queued > 0 and paused is not None and _unavailable(state, now, config)
    if failing:
        state = replace(state, queued=0)
    admitted: list[int] = []
    while page_allowance(state, now, config) > 0:
        state, unit_id = _dispatch(state, now, config)
        admitted.append(unit_id)
    after = decide_release(state, now, config) if decision.release else decision
    return state, Actions(decision, tuple(admitted), paused, failing,
                          _next_wake_at(state, after, now, config))


def fold(state: GateState, event: Event, now: float, config: GateConfig) -> GateState:
    """What one event changes, before any decision."""
    match event:
        case Scraped():
            return _observe(state, event, config)
        case ScrapeFailed():
            return replace(state, signals=replace(state.signals, last_scrape_ok=False))
        case Joined():
            return replace(state, queued=state.queued + 1)
        case Left(pages):
            if not 0 < pages <= state.queued:
                raise ValueError("no such waiters to remove")
            return replace(state, queued=state.queued - pages)
        case Finished():
            return _finished(state, event, now, config)
    return state


def _observe(state: GateState, scrape: Scraped, config: GateConfig) -> GateState:
    """The front end, the signals and the drain; on a usable reading, C."""
    reading = scrape.reading
    if _signals.out_of_order(state.signals, reading):
        return state
    front, excess = state.front, 0
    if scrape.in_flight is not None and scrape.sent is not None:
        gap = _signals.gap(scrape.in_flight, reading)
        front = _signals.fold_front(front, reading.at, gap, scrape.sent, config)
        excess = _signals.excess(gap, _signals.tolerance(front, _signals.drain(state.rates)))
    seen, preempted = _signals.fold(state.signals, reading, excess, config)
    rates = _signals.sample_drain(state.rates, reading.at, state.completed_total,
                                  state.in_flight, config)
    state = replace(state, signals=seen, rates=rates, front=front,
                    balance_at_reading=state.completed_total - state.admitted_total)
    if not _signals.usable(seen, config):
        return state  # C stays frozen
    return replace(state, concurrency=_limit.update(
        state.concurrency, reading, queue=seen.queue, peak=seen.peak, in_flight=state.in_flight,
        preempted=preempted, drain=_signals.drain(rates), transit=_signals.transit(front),
        latency=_signals.mean_latency(rates), config=config))


def _finished(state: GateState, event: Finished, now: float, config: GateConfig) -> GateState:
    """A finished page is progress, a completion and a latency; any other returns its credit."""
    if state.in_flight <= 0:
        raise ValueError("no page in flight")
    state = replace(state, in_flight=state.in_flight - 1)
    if not event.outcome.server_finished:
        return replace(state, units=state.units.give_back(event.unit_id))
    rates = state.rates
    if event.dispatched_at is not None:
        rates = _signals.add_latency(rates, now - event.dispatched_at, now, config)
    return replace(
        state, units=state.units.completed(event.unit_id), rates=rates, finished_at=now,
        completed_total=state.completed_total + 1,
        concurrency=replace(state.concurrency, acked=state.concurrency.acked + 1))


def reading_pause(signals: Signals, now: float, config: GateConfig) -> Reason | None:
    """Why the readings pause pages now (one failed scrape on a fresh reading does not)."""
    reading = signals.reading
    if reading is None:
        return Reason.NO_READING
    if _signals.stale(signals, now, config):
        return Reason.STALE
    if not reading.healthy:
        return Reason.UNHEALTHY
    if _signals.stalled(signals, config):
        return Reason.STALLED
    return None


def release_hold(signals: Signals, now: float, config: GateConfig) -> Reason | None:
    """Why the readings hold releases: as they pause pages, or the last scrape failed."""
    if signals.reading is not None and not signals.last_scrape_ok:
        return Reason.SCRAPE_FAILED
    return reading_pause(signals, now, config)


def decide_release(state: GateState, now: float, config: GateConfig) -> ReleaseDecision:
    """The one release decision: a unit now, or the first rule that holds it."""
    reason = release_hold(state.signals, now, config)
    reading = state.signals.reading
    if reason is not None or reading is None:
        return _limit.hold(reason or Reason.NO_READING)
    room = state.concurrency.room(state.in_flight, config)
    held = _limit.release_rules(state.units, queued=state.queued, room=room,
                                waiting=reading.waiting, peak=state.signals.peak, now=now,
                                config=config)
    return held or ReleaseDecision(True, state.unit_size(config), Reason.RELEASED)


def pause_reason(state: GateState, now: float, config: GateConfig) -> Reason | None:
    """Why pages may not flow now. A stale reading does not pause them while it was usable
    and a page finished within stale_after: then pages replace the pages back."""
    reason = reading_pause(state.signals, now, config)
    if reason is Reason.STALE and _ack_clocked(state, now, config):
        return None
    return reason


def _ack_clocked(state: GateState, now: float, config: GateConfig) -> bool:
    finished = state.finished_at
    return (_signals.usable(state.signals, config) and finished is not None
            and now - finished < config.stale_after_seconds)


def page_allowance(state: GateState, now: float, config: GateConfig) -> int:
    """Waiting, credited pages that may go in flight now."""
    if pause_reason(state, now, config) is not None:
        return 0
    tokens = state.bucket.whole_tokens(now, _limit.pace_rate(state.rates, config), config)
    return max(0, min(_dispatchable(state, now, config), tokens))


def _dispatchable(state: GateState, now: float, config: GateConfig) -> int:
    """min(waiting, credits, C's room), and on a stale reading the pages back since it."""
    room = state.concurrency.room(state.in_flight, config)
    allowed = min(state.queued, state.units.open_credits, room)
    if _signals.stale(state.signals, now, config):
        back = state.completed_total - state.admitted_total - state.balance_at_reading
        allowed = min(allowed, back)
    return allowed


def _dispatch(state: GateState, now: float, config: GateConfig) -> tuple[GateState, int]:
    """One credited page goes in flight; returns the unit whose credit it spent."""
    units, unit_id = state.units.spend()
    stale = _signals.stale(state.signals, now, config)
    return replace(
        state, units=units, queued=state.queued - 1, in_flight=state.in_flight + 1,
        bucket=state.bucket.take(now, _limit.pace_rate(state.rates, config), config),
        admitted_total=state.admitted_total + 1, clocked_total=state.clocked_total + stale,
    ), unit_id


def _unavailable(state: GateState, now: float, config: GateConfig) -> bool:
    """No usable reading for unavailable_after: waiting pages should fail, not hang."""
    limit = config.unavailable_after_seconds
    return limit is not None and now - _usable_since(state) >= limit


def _usable_since(state: GateState) -> float:
    since = state.signals.last_usable_at
    return state.started_at if since is None else since


def _next_wake_at(state: GateState, decision: ReleaseDecision, now: float, config: GateConfig
                  ) -> float | None:
    """The next time the gate must look again even if no event arrives."""
    times = [] if decision.recheck_at is None else [decision.recheck_at]
    if pause_reason(state, now, config) is None:
        if _dispatchable(state, now, config) > 0:
            refill = _limit.pace_rate(state.rates, config)
            times.append(state.bucket.next_token_at(now, refill, config))
        if _signals.stale(state.signals, now, config) and state.finished_at is not None:
            times.append(state.finished_at + config.stale_after_seconds)  # the pause, if none
    elif state.queued > 0 and config.unavailable_after_seconds is not None:
        times.append(_usable_since(state) + config.unavailable_after_seconds)
    return min(times, default=None)
