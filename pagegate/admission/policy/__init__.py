"""The admission policy: pure decisions from server readings, outcomes and time.

Everything here is a function of (state, input, now, config) that returns a new frozen
state or a decision, like a Netflix concurrency-limits `Limit`: no asyncio, no I/O, no
clock reads. The runtime `Gate` (gate.py) feeds it and enforces what it says.

Two levels, because they answer different questions:

UNIT admission, "how much work may the pipeline promise the server?"  (units.py)
    A release grants one unit of page credits, under the four user rules (serialized,
    peak ratio, cooldown, progress) and only on a good, fresh reading (signals.py).
    A unit is unit_pages pages, or two cooldowns of the drain if that is more.

PAGE pacing, "how many credited pages may be on the wire right now?"
    A credited page goes in flight only while in_flight < C, the adaptive concurrency
    limit steered on engine signals (limit.py), in_flight < max_in_flight_pages, and the
    token bucket (pacing.py) has a token, so pages reach the server at about the rate
    it drains them, never as one burst. The server's metrics are the truth, so several
    flow runs sharing one server all back off together.

Parts: frontend (the API server as a pipeline stage: what of the gap is a queue),
signals (readings: peak, queue, freshness, stalls, pauses), limit (C), pacing
(the bucket), rates (drain, latency), units (credits, rules, sizing).
Each has a frozen state and pure functions; state.py holds them together in GateState
and gate_policy.py composes them into the calls the runtime makes. The settings are in
config.py: GateConfig (what a user sets) and GateTuning (the controller's constants).
"""

from pagegate.admission.policy.config import GateConfig, GateTuning
from pagegate.admission.policy.gate_policy import (
    add_waiter,
    apply_release,
    decide_release,
    dispatch,
    drain_rate,
    frontend_tolerance,
    mean_latency,
    next_token_at,
    next_wake_at,
    observe,
    observe_failure,
    on_outcome,
    pace_rate,
    page_allowance,
    pause_reason,
    remove_waiter,
    unavailable,
    unit_size,
    waiting_band,
)
from pagegate.admission.policy.reasons import Reason, ReleaseDecision
from pagegate.admission.policy.state import GateState, initial_state

__all__ = [
    "GateConfig",
    "GateState",
    "GateTuning",
    "Reason",
    "ReleaseDecision",
    "add_waiter",
    "apply_release",
    "decide_release",
    "dispatch",
    "drain_rate",
    "frontend_tolerance",
    "initial_state",
    "mean_latency",
    "next_token_at",
    "next_wake_at",
    "observe",
    "observe_failure",
    "on_outcome",
    "pace_rate",
    "page_allowance",
    "pause_reason",
    "remove_waiter",
    "unavailable",
    "unit_size",
    "waiting_band",
]
