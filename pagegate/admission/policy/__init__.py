"""The admission policy: `step(state, event, now, config) -> (state, actions)`, pure (no asyncio,
no I/O, no clock reads). The runtime `Gate` (gate.py) feeds it every event and does what the
actions say; docs/admission.md gives the rule in full. The modules behind this face are private."""

from pagegate.admission.policy._config import GateConfig, GateTuning
from pagegate.admission.policy._limit import Case, Reason, ReleaseDecision
from pagegate.admission.policy._step import (
    Actions,
    Event,
    Finished,
    GateState,
    Joined,
    Left,
    Scraped,
    Tick,
    initial_state,
    step,
)

__all__ = [
    "Actions", "Case", "Event", "Finished", "GateConfig", "GateState", "GateTuning", "Joined",
    "Left", "Reason", "ReleaseDecision", "Scraped", "Tick", "initial_state", "step",
]
