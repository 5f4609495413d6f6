"""The gate's settings: what a user sets (GateConfig), the controller's constants (GateTuning)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

SLACK = 1e-9
"""Float arithmetic may leave 7.9999999 where 8 is meant: count it as the whole number."""


class GateTuning(NamedTuple):
    """The controller's constants: no user sets them, so nothing checks them (a NamedTuple:
    asdict keeps it whole)."""

    smoothing_polls: float = 3.0              # the front end's and the recent drain's window
    waiting_band_min: float = 2.0             # the band's floor, in requests
    excess_cut_share: float = 0.5             # a queue cut takes this share of the excess
    additive_growth_fraction: float = 0.05    # C's growth after slow start, per reading
    kv_signal_floor: float = 0.05             # below this KV use, KV per request is noise
    preemption_backoff: float = 0.9           # a preemption cuts C to this share in flight
    pace_min_rate: float = 10.0               # the bucket's floor, pages/s
    pace_gain: float = 4.0                    # the bucket refills at this multiple of the drain


@dataclass(frozen=True, slots=True, kw_only=True)
class GateConfig:
    """What a user sets: the AdmissionGate Block's fields; olmOCR's defaults where it had one."""

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
        if problems:
            raise ValueError("invalid GateConfig: " + "; ".join(problems))

    @property
    def concurrency_start(self) -> int:
        """C's start, and its floor: never above the hard cap."""
        return min(self.initial_concurrency, self.max_in_flight_pages)
