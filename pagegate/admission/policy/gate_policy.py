"""The gate's policy: the parts composed into the calls the runtime makes.

Every call is a function of (state, input, now, config) and returns a new frozen state
or a decision (see the package docstring for the two levels). The runtime (gate.py)
calls, on each event: `observe` / `observe_failure` (a scrape), `add_waiter` /
`remove_waiter`, `on_outcome` (a page is back); on each wake, `decide_release` and
`apply_release` (at most one unit), `dispatch` while `page_allowance` allows, and it
sleeps until `next_wake_at`, failing the waiters once `unavailable`.
"""

from __future__ import annotations

from dataclasses import replace

from pagegate.admission.base import Outcome
from pagegate.admission.policy import (
    conservation,
    frontend,
    limit,
    pacing,
    rates,
    signals,
    units,
)
from pagegate.admission.policy.config import GateConfig
from pagegate.admission.policy.reasons import Reason, ReleaseDecision, hold
from pagegate.admission.policy.state import GateState
from pagegate.server.metrics import Reading

# ------------------------------------------------------- readings (signals, limit, units)


def observe(
    state: GateState,
    reading: Reading,
    config: GateConfig,
    *,
    in_flight_at_scrape: int | None = None,
    sent_at_scrape: int | None = None,
) -> GateState:
    """Fold a good scrape in: the front end, the signals and the drain; on a usable
    reading, C and whether the last unit ran dry while the server had room.

    `in_flight_at_scrape` is our count of requests on the wire when the scrape started
    (the count after it may include pages sent while it was in transit), and
    `sent_at_scrape` how many we had sent in all by then; without them the front end is
    no signal.
    """
    if signals.out_of_order(state.signals, reading):
        return state
    front = state.front
    excess = 0
    if in_flight_at_scrape is not None and sent_at_scrape is not None:
        gap = frontend.gap(in_flight_at_scrape, reading)
        front = frontend.fold(front, reading.at, gap, sent_at_scrape, config)
        excess = frontend.excess(gap, frontend.tolerance(front, rates.measured_drain(state.rates)))
    seen, preempted = signals.fold(state.signals, reading, excess, config)
    drained = rates.sample_drain(
        state.rates, reading.at, state.completed_total, state.in_flight, config
    )
    acks = conservation.at_reading(state.acks, state.completed_total, state.admitted_total)
    state = replace(state, signals=seen, rates=drained, front=front, acks=acks)
    if not signals.usable(seen, config):
        return state  # C stays frozen, and so does the dry clock
    drain = rates.measured_drain(drained)
    transit = frontend.transit(front, config)
    estimated = limit.first_estimate(state.concurrency, reading, config)
    concurrency = limit.within_latency(
        estimated,
        limit.steer(estimated, reading, queue=seen.queue, transit=transit, peak=seen.peak,
                    in_flight=state.in_flight, preempted=preempted, config=config, drain=drain),
        latency=rates.mean_latency(drained), drain=drain, config=config,
    )
    return replace(state, concurrency=concurrency)


def observe_failure(state: GateState, at: float, config: GateConfig) -> GateState:
    """A scrape failed or timed out: a missing reading, never a zero one."""
    return replace(state, signals=signals.scrape_failed(state.signals))


def waiting_band(state: GateState, config: GateConfig) -> float:
    """The server queue C aims for: it grows below it and is cut above it (limit.waiting_band)."""
    return limit.waiting_band(state.peak, config, rates.measured_drain(state.rates),
                              frontend.transit(state.front, config))


def frontend_tolerance(state: GateState) -> int | None:
    """Our requests the front end holds as a pipeline stage (frontend.tolerance)."""
    return frontend.tolerance(state.front, rates.measured_drain(state.rates))


def pause_reason(state: GateState, now: float, config: GateConfig) -> Reason | None:
    """Why page dispatch is paused now, or None when pages may flow.

    A stale reading does not pause dispatch while pages keep finishing and that reading
    was usable: pages then flow one for one with the pages back (conservation.py).
    """
    reason = signals.pause_reason(state.signals, now, config)
    if reason is Reason.STALE and _ack_clocked(state, now, config):
        return None
    return reason


def _ack_clocked(state: GateState, now: float, config: GateConfig) -> bool:
    """The newest reading is stale but was usable, and a page finished within stale_after."""
    return signals.usable(state.signals, config) and conservation.ticking(
        state.acks, now, config.stale_after_seconds
    )


# ---------------------------------------------------------------------------- rates


def drain_rate(state: GateState) -> float:
    return rates.measured_drain(state.rates)


def mean_latency(state: GateState) -> float | None:
    return rates.mean_latency(state.rates)


# ---------------------------------------------------------------------------- waiters


def add_waiter(state: GateState) -> GateState:
    return replace(state, queued=state.queued + 1)


def remove_waiter(state: GateState) -> GateState:
    """A waiting page gave up before it was admitted."""
    if state.queued <= 0:
        raise ValueError("no waiter to remove")
    return replace(state, queued=state.queued - 1)


# ------------------------------------ UNIT admission: releases under the four user rules


def unit_size(state: GateState, config: GateConfig) -> int:
    """Pages in the next unit (units.size, at the drain measured so far)."""
    return units.size(rates.measured_drain(state.rates), config)


def decide_release(state: GateState, now: float, config: GateConfig) -> ReleaseDecision:
    """The one release decision: release a unit now, or the first rule that holds it."""
    reason = signals.release_hold(state.signals, now, config)
    reading = state.reading
    if reason is not None or reading is None:
        return hold(reason or Reason.NO_READING)
    held = units.release_rules(
        state.units,
        queued=state.queued,
        room=_room(state, config),
        waiting=reading.waiting,
        peak=state.peak,
        now=now,
        config=config,
    )
    if held is not None:
        return held
    return ReleaseDecision(True, unit_size(state, config), Reason.RELEASED)


def apply_release(
    state: GateState, decision: ReleaseDecision, now: float, config: GateConfig
) -> GateState:
    """Grant the unit a `decide_release` call returned."""
    if not decision.release or decision.pages < 1:
        raise ValueError("apply_release needs a releasing decision")
    return replace(state, units=units.grant(state.units, decision.pages, now))


# ------------------------------------------ PAGE pacing: C, the cap and the token bucket


def pace_rate(state: GateState, config: GateConfig) -> float:
    """Token refill rate (pages/s)."""
    return pacing.rate(rates.pace_drain(state.rates), config)


def page_allowance(state: GateState, now: float, config: GateConfig) -> int:
    """How many waiting, credited pages may go in flight now."""
    if pause_reason(state, now, config) is not None:
        return 0
    tokens = pacing.whole_tokens(state.bucket, now, pace_rate(state, config), config)
    return max(0, min(_dispatchable(state, now, config), tokens))


def _dispatchable(state: GateState, now: float, config: GateConfig) -> int:
    """Waiting, credited pages that C, the hard cap and (on a stale reading) the pages
    back let in flight, before the token bucket."""
    allowed = min(state.queued, state.open_credits, _room(state, config))
    if signals.stale(state.signals, now, config):
        allowed = min(allowed, conservation.budget(
            state.acks, state.completed_total, state.admitted_total))
    return allowed


def next_token_at(state: GateState, now: float, config: GateConfig) -> float:
    """When the pacing bucket next holds a whole token."""
    return pacing.next_token_at(state.bucket, now, pace_rate(state, config), config)


def dispatch(state: GateState, now: float, config: GateConfig) -> tuple[GateState, int]:
    """One credited page goes in flight; returns the id of the unit whose credit it spent."""
    if page_allowance(state, now, config) < 1:
        raise ValueError("no page may be dispatched now")
    credit, unit_id = units.spend(state.units)
    queued = state.queued - 1
    stale = signals.stale(state.signals, now, config)
    state = replace(
        state,
        acks=conservation.clocked(state.acks) if stale else state.acks,
        units=credit,
        bucket=pacing.take(state.bucket, now, pace_rate(state, config), config),
        queued=queued,
        in_flight=state.in_flight + 1,
        admitted_total=state.admitted_total + 1,
    )
    return state, unit_id


def on_outcome(
    state: GateState,
    outcome: Outcome,
    unit_id: int,
    now: float,
    config: GateConfig,
    *,
    dispatched_at: float | None = None,
) -> GateState:
    """A page gave its permit back. Pages the server did not finish return their credit,
    and a CAPACITY outcome cuts C.

    `dispatched_at` (when the page went in flight) feeds the mean page latency that the
    latency limit reads.
    """
    if state.in_flight <= 0:
        raise ValueError("no page in flight")
    returning = state.in_flight
    state = replace(state, in_flight=returning - 1)
    if outcome.server_finished:
        latencies = state.rates
        if dispatched_at is not None:
            latencies = rates.add_latency(latencies, now - dispatched_at, now, config)
        return replace(
            state,
            units=units.completed(state.units, unit_id),
            completed_total=state.completed_total + 1,
            rates=latencies,
            concurrency=limit.completed(state.concurrency),
            acks=conservation.finished(state.acks, now),
        )
    state = replace(state, units=units.give_back(state.units, unit_id))
    if outcome is Outcome.CAPACITY:
        state = replace(state, concurrency=limit.back_off(state.concurrency, returning, now, config))
    return state


def _room(state: GateState, config: GateConfig) -> int:
    return limit.room(state.concurrency, state.in_flight, config)


# ---------------------------------------------------------------------------- timers


def unavailable(state: GateState, now: float, config: GateConfig) -> bool:
    """Paused for longer than unavailable_after: waiting pages should fail, not hang."""
    if config.unavailable_after_seconds is None:
        return False
    if pause_reason(state, now, config) is None:
        return False
    since = signals.usable_since(state.signals, state.started_at)
    return now - since >= config.unavailable_after_seconds


def next_wake_at(
    state: GateState, decision: ReleaseDecision, now: float, config: GateConfig
) -> float | None:
    """The next time the gate must look again even if no event arrives."""
    times: list[float] = []
    if decision.recheck_at is not None:
        times.append(decision.recheck_at)
    if pause_reason(state, now, config) is None:
        if _dispatchable(state, now, config) > 0:
            times.append(next_token_at(state, now, config))
        finished_at = state.acks.finished_at
        if signals.stale(state.signals, now, config) and finished_at is not None:
            times.append(finished_at + config.stale_after_seconds)  # the pause, if none finish
    elif state.queued > 0 and config.unavailable_after_seconds is not None:
        since = signals.usable_since(state.signals, state.started_at)
        times.append(since + config.unavailable_after_seconds)
    return min(times) if times else None
