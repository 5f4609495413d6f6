"""The admission policy: pure decisions from server readings, outcomes and time.

`step(state, event, now, config) -> (state, actions)` is the whole of it: no asyncio, no
I/O, no clock reads. The runtime `Gate` (gate.py) feeds it every event and does what the
actions say. docs/admission.md gives the rule in full; the modules behind this face are
private.
"""

from pagegate.admission.policy._config import GateConfig, GateTuning
from pagegate.admission.policy._limit import Case
from pagegate.admission.policy._step import (
    Actions,
    Event,
    Finished,
    GateState,
    Joined,
    Left,
    Scraped,
    ScrapeFailed,
    Tick,
    drain_rate,
    frontend_latency,
    frontend_tolerance,
    initial_state,
    mean_latency,
    pause_reason,
    step,
    unit_size,
    waiting_band,
)
from pagegate.admission.policy._units import Reason, ReleaseDecision

__all__ = [
    "Actions", "Case", "Event", "Finished", "GateConfig", "GateState", "GateTuning", "Joined",
    "Left", "Reason", "ReleaseDecision", "ScrapeFailed", "Scraped", "Tick", "drain_rate",
    "frontend_latency", "frontend_tolerance", "initial_state", "mean_latency", "pause_reason",
    "step", "unit_size", "waiting_band",
]
