"""Admission control: how much page work reaches the vLLM server, and when."""

from pagegate.admission.base import Admission, FixedLimit, Outcome, Permit, outcome_for_exception
from pagegate.admission.gate import Gate, GateClosedError, MetricsSource
from pagegate.admission.metrics import (
    MetricsError,
    MetricsPoller,
    metrics_url_for,
    parse_vllm_metrics,
)
from pagegate.admission.policy import GateConfig, GateState, Reading, Reason, ReleaseDecision

__all__ = [
    "Admission",
    "FixedLimit",
    "Gate",
    "GateClosedError",
    "GateConfig",
    "GateState",
    "MetricsError",
    "MetricsPoller",
    "MetricsSource",
    "Outcome",
    "Permit",
    "Reading",
    "Reason",
    "ReleaseDecision",
    "metrics_url_for",
    "outcome_for_exception",
    "parse_vllm_metrics",
]
