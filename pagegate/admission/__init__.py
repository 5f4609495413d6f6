"""Admission control: how much page work reaches the vLLM server, and when."""

from pagegate.admission.base import (
    Admission,
    AdmissionSignals,
    FixedLimit,
    Outcome,
    Permit,
    outcome_for_exception,
)
from pagegate.admission.gate import Gate
from pagegate.admission.metrics import MetricsPoller
from pagegate.admission.policy import GateConfig, GateState, GateTuning, Reason, ReleaseDecision
from pagegate.admission.scraper import MetricsSource
from pagegate.errors import GateClosedError, MetricsError
from pagegate.server.metrics import Reading, metrics_url_for, parse_vllm_metrics

__all__ = [
    "Admission",
    "AdmissionSignals",
    "FixedLimit",
    "Gate",
    "GateClosedError",
    "GateConfig",
    "GateState",
    "GateTuning",
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
