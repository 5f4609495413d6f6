"""The gate's one pure step: fold an event in, make one release decision, admit what may go,
and say when to look again. The runtime (gate.py) calls it on every event and timer."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from pagegate.admission.base import Outcome
from pagegate.admission.policy import _signals
from pagegate.admission.policy._config import GateConfig
from pagegate.admission.policy._limit import Bucket, Concurrency, Reason, ReleaseDecision, Units
from pagegate.admission.policy._signals import FrontEnd, Rates, Signals
from pagegate.server.metrics import Reading


@dataclass(frozen=True, slots=True, kw_only=True)
class GateState:
    """Everything the policy remembers (the first: `initial_state`), and what it decides from it."""

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

    def unit_size(self, config: GateConfig) -> int:
        """Pages in a unit: max(unit_pages, ceil(2 x drain x cooldown))."""
        drain = self.rates.drain_rate()
        return max(config.unit_pages, math.ceil(2.0 * drain * config.cooldown_seconds))

    def waiting_band(self, config: GateConfig) -> float:
        """band = max(waiting_band_min, drain x (poll + transit))"""
        refill_s = config.poll_interval_seconds + self.front.transit()
        return max(config.tuning.waiting_band_min, self.rates.drain_rate() * refill_s)

    def decide_release(self, now: float, config: GateConfig) -> ReleaseDecision:
        """A unit now, or the first rule that holds it: the readings, demand, the last unit used
        up (unless C has more room than its credits), then the four user rules."""
        reason = reading_pause(self.signals, now, config)
        reading, units = self.signals.reading, self.units
        if reason is not None or reading is None:
            return ReleaseDecision(reason or Reason.NO_READING)
        if self.queued <= units.open_credits:
            return ReleaseDecision(Reason.NO_DEMAND)
        if 0 < units.open_credits >= self.concurrency.room(self.in_flight, config):
            return ReleaseDecision(Reason.CREDITS_LEFT)
        if units.last_release_at is not None:
            ready_at = units.last_release_at + config.cooldown_seconds
            if now < ready_at:
                return ReleaseDecision(Reason.COOLDOWN, recheck_at=ready_at)
            if config.require_progress and units.unit_completed == 0:
                return ReleaseDecision(Reason.PROGRESS)
        if reading.waiting > config.peak_ratio * self.signals.peak:
            return ReleaseDecision(Reason.PEAK_RATIO)
        return ReleaseDecision(Reason.RELEASED, self.unit_size(config))

    def pause_reason(self, now: float, config: GateConfig) -> Reason | None:
        """Why pages may not flow now. A stale reading does not pause them while it was usable
        and a page finished within stale_after: then pages replace the pages back."""
        reason, finished = reading_pause(self.signals, now, config), self.finished_at
        ack_clocked = (reason is Reason.STALE and finished is not None  # the cheap tests first
                       and now - finished < config.stale_after_seconds
                       and self.signals.usable(config))
        return None if ack_clocked else reason

    def page_allowance(self, now: float, config: GateConfig) -> int:
        """Waiting, credited pages that may go in flight now."""
        if self.pause_reason(now, config) is not None:
            return 0
        tokens = self.bucket.whole_tokens(now, self.rates.pace(config), config)
        return max(0, min(self._dispatchable(now, config), tokens))

    def _dispatchable(self, now: float, config: GateConfig) -> int:
        """min(waiting, credits, C's room), and on a stale reading the pages back since it."""
        room = self.concurrency.room(self.in_flight, config)
        allowed = min(self.queued, self.units.open_credits, room)
        if self.signals.stale(now, config):
            back = self.completed_total - self.admitted_total - self.balance_at_reading
            allowed = min(allowed, back)
        return allowed

    def dispatch(self, now: float, config: GateConfig) -> tuple[GateState, int]:
        """One credited page goes in flight; returns the unit whose credit it spent."""
        units, unit_id = self.units.spend()
        return replace(
            self, units=units, queued=self.queued - 1, in_flight=self.in_flight + 1,
            bucket=self.bucket.take(now, self.rates.pace(config), config),
            admitted_total=self.admitted_total + 1,
            clocked_total=self.clocked_total + self.signals.stale(now, config),
        ), unit_id

    def unavailable(self, now: float, config: GateConfig) -> bool:
        """No usable reading for unavailable_after: waiting pages should fail, not hang."""
        limit = config.unavailable_after_seconds
        return limit is not None and now - self.signals.usable_since >= limit

    def next_wake_at(self, decision: ReleaseDecision, now: float, config: GateConfig
                     ) -> float | None:
        """The next time the gate must look again even if no event arrives."""
        times = [] if decision.recheck_at is None else [decision.recheck_at]
        if self.pause_reason(now, config) is None:
            if self._dispatchable(now, config) > 0:
                times.append(self.bucket.next_token_at(now, self.rates.pace(config), config))
            if self.signals.stale(now, config) and self.finished_at is not None:
                times.append(self.finished_at + config.stale_after_seconds)  # the pause, if none
        elif self.queued > 0 and config.unavailable_after_seconds is not None:
            times.append(self.signals.usable_since + config.unavailable_after_seconds)
        return min(times, default=None)


def initial_state(now: float, config: GateConfig) -> GateState:
    return GateState(concurrency=Concurrency(limit=config.concurrency_start),
                     bucket=Bucket(math.inf, now), signals=Signals(usable_since=now))


# The events `step` folds in.
@dataclass(frozen=True, slots=True)
class Scraped:
    """A good scrape; our requests on the wire and sent in all when it started (0: uncounted)."""
    reading: Reading
    in_flight: int = 0
    sent: int = 0


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
    """Time passed: the wake the last step asked for, or a scrape that failed."""


Event = Scraped | Joined | Left | Finished | Tick


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
    decision = state.decide_release(now, config)
    if decision.release:
        state = replace(state, units=state.units.grant(decision.pages, now))
    paused = state.pause_reason(now, config)
    failing = state.queued > 0 and paused is not None and state.unavailable(now, config)
    if failing:
        state = replace(state, queued=0)
    admitted: list[int] = []
    while state.page_allowance(now, config) > 0:
        state, unit_id = state.dispatch(now, config)
        admitted.append(unit_id)
    after = state.decide_release(now, config) if decision.release else decision
    return state, Actions(decision, tuple(admitted), paused, failing,
                          state.next_wake_at(after, now, config))


def fold(state: GateState, event: Event, now: float, config: GateConfig) -> GateState:
    """What one event changes, before any decision. A reading moves the front end, the signals
    and the drain, and on a usable one C; a page back finished is progress, a completion and a
    latency; one back unfinished returns its credit."""
    match event:
        case Scraped(reading, on_wire, sent) if not state.signals.out_of_order(reading):
            gap = _signals.gap(on_wire, reading)
            front = state.front.fold(reading.at, gap, sent, config)
            excess = front.excess(gap, state.rates.drain_rate())
            signals, preempted = state.signals.fold(reading, excess, config)
            rates = state.rates.sample(reading.at, state.completed_total, state.in_flight, config)
            state = replace(state, signals=signals, rates=rates, front=front,
                            balance_at_reading=state.completed_total - state.admitted_total)
            if signals.usable(config):  # else C stays frozen
                state = replace(state, concurrency=state.concurrency.update(
                    reading, queue=signals.queue, in_flight=state.in_flight,
                    preempted=preempted, band=state.waiting_band(config), drain=rates.drain_rate(),
                    latency=rates.latency.value(), config=config))
        case Joined():
            return replace(state, queued=state.queued + 1)
        case Left(pages):
            if not 0 < pages <= state.queued:
                raise ValueError("no such waiters to remove")
            return replace(state, queued=state.queued - pages)
        case Finished(outcome, unit_id, dispatched_at):
            if state.in_flight <= 0:
                raise ValueError("no page in flight")
            state = replace(state, in_flight=state.in_flight - 1)
            if not outcome.server_finished:
                return replace(state, units=state.units.give_back(unit_id))
            rates = state.rates
            if dispatched_at is not None:
                rates = rates.add_latency(now - dispatched_at, now, config)
            return replace(
                state, units=state.units.completed(unit_id), rates=rates, finished_at=now,
                completed_total=state.completed_total + 1,
                concurrency=replace(state.concurrency, acked=state.concurrency.acked + 1))
    return state


def reading_pause(signals: Signals, now: float, config: GateConfig) -> Reason | None:
    """Why the readings pause pages and hold releases now."""
    if signals.reading is None:
        return Reason.NO_READING
    if signals.stale(now, config):
        return Reason.STALE
    if not signals.reading.healthy:
        return Reason.UNHEALTHY
    return Reason.STALLED if signals.stalled(config) else None
