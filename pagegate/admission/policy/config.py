"""The gate's settings: what a user sets (GateConfig) and the controller's constants (GateTuning).

GateConfig holds exactly what the AdmissionGate Block exposes: olmOCR's four rules, the
hard bounds, the reading cadence and the time constants that scale with page time. The
controller's own constants sit in GateTuning, each named once; docs/admission.md gives
the value of each and why. A user never needs to touch GateTuning; tests pass one to
make the controller's behaviour show up in a few steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class GateTuning(NamedTuple):
    """The controller's constants (docs/admission.md, "Tuning constants").

    A NamedTuple rather than a dataclass so that `dataclasses.asdict(config)` keeps it
    as one value: code that compares a GateConfig with the defaults field by field (the
    bench's reports, the tests' scaled configs) sees it whole. GateConfig validates it.
    """

    # signals: what a reading says
    stall_after_seconds: float | None = 60.0
    # frontend: the API server as a pipeline stage
    frontend_smoothing_polls: float = 4.0
    frontend_min_entered: float = 1.0
    # limit: the adaptive concurrency limit C
    min_concurrency: int = 4
    waiting_band_fraction: float = 0.05
    waiting_band_min: float = 2.0
    refill_peak_cap: float = 2.0
    filling_kv_share: float = 0.5
    excess_cut_share: float = 0.5
    regrow_peak_share: float = 0.5
    additive_growth_fraction: float = 0.05
    slow_start_per_completion: float = 2.0
    kv_signal_floor: float = 0.05
    preemption_backoff: float = 0.9
    capacity_backoff: float = 0.5
    # pacing: the token bucket
    pace_min_rate: float = 10.0
    pace_gain: float = 4.0
    pace_window_polls: float = 2.0

    def problems(self) -> list[str]:
        """What is inconsistent in these constants (empty when nothing is)."""
        checks = [
            (self.stall_after_seconds is None or self.stall_after_seconds > 0.0,
             "stall_after_seconds must be > 0 or None"),
            (self.frontend_smoothing_polls > 0.0, "frontend_smoothing_polls must be > 0"),
            (self.frontend_min_entered > 0.0, "frontend_min_entered must be > 0"),
            (self.min_concurrency >= 1, "min_concurrency must be >= 1"),
            (self.waiting_band_fraction >= 0.0, "waiting_band_fraction must be >= 0"),
            (self.waiting_band_min >= 0.0, "waiting_band_min must be >= 0"),
            (self.refill_peak_cap >= 0.0, "refill_peak_cap must be >= 0"),
            (0.0 < self.filling_kv_share <= 1.0, "filling_kv_share must be in (0, 1]"),
            (0.0 < self.excess_cut_share <= 1.0, "excess_cut_share must be in (0, 1]"),
            (0.0 <= self.regrow_peak_share <= 1.0, "regrow_peak_share must be in [0, 1]"),
            (self.additive_growth_fraction >= 0.0, "additive_growth_fraction must be >= 0"),
            (self.slow_start_per_completion >= 1.0, "slow_start_per_completion must be >= 1"),
            (0.0 < self.kv_signal_floor < 1.0, "kv_signal_floor must be in (0, 1)"),
            (0.0 < self.preemption_backoff < 1.0, "preemption_backoff must be in (0, 1)"),
            (0.0 < self.capacity_backoff < 1.0, "capacity_backoff must be in (0, 1)"),
            (self.pace_min_rate > 0.0, "pace_min_rate must be > 0"),
            (self.pace_gain >= 1.0, "pace_gain must be >= 1"),
            (self.pace_window_polls > 0.0, "pace_window_polls must be > 0"),
        ]
        return [message for ok, message in checks if not ok]


@dataclass(frozen=True, slots=True, kw_only=True)
class GateConfig:
    """What a user sets: the AdmissionGate Block's fields. Defaults are olmOCR's where it had one.

    The reason for each default is in docs/admission.md.
    """

    # The four user rules (olmOCR's values).
    peak_ratio: float = 0.1
    cooldown_seconds: float = 30.0
    require_progress: bool = True
    # Hard bounds.
    max_in_flight_pages: int = 1600
    kv_cache_ceiling: float = 0.9
    page_latency_limit_seconds: float | None = 150.0
    # Readings.
    poll_interval_seconds: float = 1.0
    stale_after_seconds: float = 5.0
    scrape_timeout_seconds: float = 4.0
    peak_half_life_seconds: float = 600.0
    unavailable_after_seconds: float | None = 900.0
    # Starting points and the rates' memory.
    unit_pages: int = 1024
    initial_concurrency: int = 4
    drain_window_seconds: float = 60.0
    # The controller's constants (not a user setting).
    tuning: GateTuning = field(default_factory=GateTuning)

    def __post_init__(self) -> None:
        checks = [
            (0.0 <= self.peak_ratio <= 1.0, "peak_ratio must be in [0, 1]"),
            (self.cooldown_seconds >= 0.0, "cooldown_seconds must be >= 0"),
            (self.max_in_flight_pages >= 1, "max_in_flight_pages must be >= 1"),
            (0.0 < self.kv_cache_ceiling <= 1.0, "kv_cache_ceiling must be in (0, 1]"),
            (self.page_latency_limit_seconds is None or self.page_latency_limit_seconds > 0.0,
             "page_latency_limit_seconds must be > 0 or None"),
            (self.poll_interval_seconds > 0.0, "poll_interval_seconds must be > 0"),
            (self.stale_after_seconds > self.poll_interval_seconds,
             "stale_after_seconds must exceed poll_interval_seconds"),
            (self.scrape_timeout_seconds > 0.0, "scrape_timeout_seconds must be > 0"),
            (self.peak_half_life_seconds > 0.0, "peak_half_life_seconds must be > 0"),
            (self.unavailable_after_seconds is None or self.unavailable_after_seconds > 0.0,
             "unavailable_after_seconds must be > 0 or None"),
            (self.unit_pages >= 1, "unit_pages must be >= 1"),
            (self.initial_concurrency >= 1, "initial_concurrency must be >= 1"),
            (self.drain_window_seconds > 0.0, "drain_window_seconds must be > 0"),
        ]
        problems = [message for ok, message in checks if not ok]
        if isinstance(self.tuning, GateTuning):
            problems += self.tuning.problems()
        else:
            problems.append("tuning must be a GateTuning")
        if problems:
            raise ValueError("invalid GateConfig: " + "; ".join(problems))

    @property
    def concurrency_floor(self) -> int:
        """The lowest C: the tuning's floor, but never above the start or the hard cap."""
        return min(self.tuning.min_concurrency, self.initial_concurrency, self.max_in_flight_pages)

    @property
    def concurrency_start(self) -> int:
        return min(self.initial_concurrency, self.max_in_flight_pages)
