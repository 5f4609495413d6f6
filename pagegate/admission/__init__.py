"""Admission control: how much page work reaches the vLLM server, and when."""

from pagegate.admission.base import Admission, FixedLimit, Outcome, Permit, outcome_for_exception

__all__ = ["Admission", "FixedLimit", "Outcome", "Permit", "outcome_for_exception"]
