"""The admission policy, pure (no asyncio, I/O or clock): `step(state, event, now, config) ->
(state, actions)`, which gate.py calls on every event. The modules behind this face are private."""

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
