"""What the gate shows of itself: its snapshot for dashboards and reports, and its
signals for a router. Pure functions of the policy state and the runtime's counters."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from pagegate.admission.base import AdmissionSignals
from pagegate.admission.policy import GateConfig, GateState, ReleaseDecision
from pagegate.server.metrics import Reading


@dataclass(frozen=True, slots=True)
class Release:
    """The last release: when, how many pages, the reading that allowed it, and the drain
    that sized it."""

    at: float
    pages: int
    reading: Reading
    drain: float


@dataclass(frozen=True, slots=True)
class RuntimeCounts:
    """What the runtime itself counted, beside the policy state."""

    closed: bool
    outcomes: dict[str, int]
    last_release: Release | None
    last_decision: ReleaseDecision | None
    pauses: int
    unavailable_failures: int
    last_scrape_error: str | None


def release_line(state: GateState, config: GateConfig, release: Release) -> str:
    """The log line of a release, with the reading that justified it."""
    r = release.reading
    return (
        f"release {state.units.units_released}: unit of {release.pages} pages; waiting={r.waiting} "
        f"running={r.running} kv={r.kv_usage:.2f} peak={state.signals.peak:.1f} "
        f"(threshold {config.peak_ratio * state.signals.peak:.1f}) C={state.concurrency.limit} "
        f"in_flight={state.in_flight} queued={state.queued} "
        f"drain={release.drain:.2f} pages/s"
    )


def gate_signals(state: GateState, config: GateConfig, now: float) -> AdmissionSignals:
    paused = state.pause_reason(now, config)
    return AdmissionSignals(
        in_flight=state.in_flight,
        queued=state.queued,
        limit=state.concurrency.limit,
        paused=None if paused is None else str(paused),
        reading_at=None if state.signals.reading is None else state.signals.reading.at,
    )


def gate_snapshot(
    state: GateState, config: GateConfig, now: float, counts: RuntimeCounts
) -> dict[str, Any]:
    release, decision = counts.last_release, counts.last_decision
    paused = state.pause_reason(now, config)
    return {
        "kind": "gate",
        "closed": counts.closed,
        "in_flight": state.in_flight,
        "queued": state.queued,
        "admitted": state.admitted_total,
        "completed": state.completed_total,
        "outcomes": dict(counts.outcomes),
        "open_credits": state.units.open_credits,
        "concurrency_limit": state.concurrency.limit,
        "slow_start": state.concurrency.slow_start,
        "limit_case": str(state.concurrency.case),
        "peak": state.signals.peak,
        "release_threshold": config.peak_ratio * state.signals.peak,
        "waiting_band": state.waiting_band(config),
        "queue_estimate": state.signals.queue,
        "frontend_latency": state.front.stage_latency(),
        "frontend_tolerance": state.front.tolerance(state.rates.drain_rate()),
        "drain_rate": state.rates.drain_rate(),
        "mean_latency": state.rates.latency.value(),
        "next_unit_pages": state.unit_size(config),
        "last_reading": None if state.signals.reading is None else asdict(state.signals.reading),
        "releases": state.units.units_released,
        "last_release_at": None if release is None else release.at,
        "last_release_pages": None if release is None else release.pages,
        "last_release_drain": None if release is None else release.drain,
        "last_release_reading": None if release is None else asdict(release.reading),
        "last_decision": None if decision is None else str(decision.reason),
        "paused": None if paused is None else str(paused),
        "pauses": counts.pauses,
        "ack_clocked_pages": state.clocked_total,
        "unavailable_failures": counts.unavailable_failures,
        "last_scrape_error": counts.last_scrape_error,
    }
