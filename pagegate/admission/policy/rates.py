"""How fast the server gets through our pages: the drain and the mean latency.

The drain is our completions per busy second, exponentially weighted over
drain_window_seconds. Sampling starts with the first completion, so the first pages'
latency is not mistaken for a slow server, and idle stretches (nothing in flight,
nothing finished) are left out, so a pause between groups does not lower it. The mean
latency is the time in flight of completed pages, weighted over the same window (the
latency limit reads it). Pacing also reads the drain over the last polls (`pace_drain`),
which a ramp does not average away.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from pagegate.admission.policy.config import GateConfig


@dataclass(frozen=True, slots=True)
class Rates:
    drain_num: float = 0.0                       # decayed completions
    drain_den: float = 0.0                       # decayed busy seconds
    drain_at: float | None = None                # time of the last drain sample
    drain_completed: int = 0                     # completions counted up to drain_at
    latency_num: float = 0.0                     # decayed sum of page latencies
    latency_den: float = 0.0                     # decayed count of timed completions
    latency_at: float | None = None
    recent_num: float = 0.0                      # completions, weighted over pace_window_polls
    recent_den: float = 0.0                      # busy seconds, weighted the same


def sample_drain(
    rates: Rates, at: float, completed_total: int, in_flight: int, config: GateConfig
) -> Rates:
    """Fold the completions since the last sample into the drain (one sample per reading)."""
    if rates.drain_at is None:
        return replace(rates, drain_at=at, drain_completed=completed_total)
    dt = at - rates.drain_at
    finished = completed_total - rates.drain_completed
    num, den = rates.drain_num, rates.drain_den
    recent_num, recent_den = rates.recent_num, rates.recent_den
    if dt > 0 and completed_total > 0 and (finished > 0 or in_flight > 0):
        decay = math.exp(-dt / config.drain_window_seconds)
        num = num * decay + finished
        den = den * decay + dt
        recent = math.exp(-dt / (config.tuning.pace_window_polls * config.poll_interval_seconds))
        recent_num = recent_num * recent + finished
        recent_den = recent_den * recent + dt
    return replace(rates, drain_num=num, drain_den=den, drain_at=at, drain_completed=completed_total,
                   recent_num=recent_num, recent_den=recent_den)


def add_latency(rates: Rates, latency: float, now: float, config: GateConfig) -> Rates:
    """Fold one completed page's time in flight into the decayed mean."""
    num, den = rates.latency_num, rates.latency_den
    if rates.latency_at is not None and now > rates.latency_at:
        decay = math.exp(-(now - rates.latency_at) / config.drain_window_seconds)
        num, den = num * decay, den * decay
    return replace(rates, latency_num=num + max(0.0, latency), latency_den=den + 1.0, latency_at=now)


def measured_drain(rates: Rates) -> float:
    """The drain as measured so far, however little busy time it rests on (0 before any)."""
    return rates.drain_num / rates.drain_den if rates.drain_den > 0.0 else 0.0


def pace_drain(rates: Rates) -> float:
    """The drain pacing follows: the larger of the window's and the last few polls'.

    In a ramp the window's mean trails the current drain by much more than a page
    latency (it averages the ramp); the last polls show where the drain is now.
    """
    recent = rates.recent_num / rates.recent_den if rates.recent_den > 0.0 else 0.0
    return max(measured_drain(rates), recent)


def mean_latency(rates: Rates) -> float | None:
    """Mean time in flight of recently completed pages; None before the first one."""
    if rates.latency_den <= 0.0:
        return None
    return rates.latency_num / rates.latency_den
