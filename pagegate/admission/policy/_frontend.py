"""The server's front end as a pipeline stage: how many of our requests it holds without a queue.

gap       = our requests on the wire - (running + waiting)
transit   = area under the gap / our sends, both decayed over smoothing_polls
latency   = the lowest transit over the last drain window (the stage without a queue)
tolerance = ceil(drain x latency);  excess = max(0, gap - tolerance)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pagegate.admission.policy._config import GateConfig
from pagegate.server.metrics import Reading

SLACK = 1e-9
"""Float arithmetic may leave 4.0000001 where 4 is meant; do not round it up to 5."""


@dataclass(frozen=True, slots=True)
class FrontEnd:
    at: float | None = None                      # time of the last sample
    gap: float = 0.0                             # the gap at the last sample
    sent_seen: int = 0                           # our sends counted up to `at`
    area: float = 0.0                            # decayed integral of the gap (request-seconds)
    entered: float = 0.0                         # decayed count of our sends
    latencies: tuple[tuple[float, float], ...] = ()  # (at, transit), last drain window


def gap(on_wire: int, reading: Reading) -> int:
    """Our requests the engine does not count yet (0 when it counts more: other tenants)."""
    return max(0, on_wire - (reading.running + reading.waiting))


def fold(front: FrontEnd, at: float, gap_now: int, sent_total: int, config: GateConfig) -> FrontEnd:
    """One reading's sample: the gap when its scrape started and our sends up to then."""
    if front.at is None or at <= front.at or sent_total < front.sent_seen:
        return FrontEnd(at, float(gap_now), sent_total, front.area, front.entered, front.latencies)
    dt = at - front.at
    decay = math.exp(-dt / (config.tuning.smoothing_polls * config.poll_interval_seconds))
    area = front.area * decay + 0.5 * (front.gap + gap_now) * dt  # trapezoid between samples
    entered = front.entered * decay + (sent_total - front.sent_seen)
    latencies = tuple((t, w) for t, w in front.latencies if at - t <= config.drain_window_seconds)
    if entered > 0.0:
        latencies = (*latencies, (at, area / entered))
    return FrontEnd(at, float(gap_now), sent_total, area, entered, latencies)


def latency(front: FrontEnd) -> float | None:
    """The stage's latency without a queue: the lowest transit over the drain window."""
    return min((w for _, w in front.latencies), default=None)


def transit(front: FrontEnd, config: GateConfig) -> float:
    """How long a request sent now takes to reach the engine, queueing included (0 unknown)."""
    return front.area / front.entered if front.entered > 0.0 else 0.0


def tolerance(front: FrontEnd, rate: float) -> int | None:
    """Requests the stage holds at `rate` pages/s without a queue (None: not known yet)."""
    stage = latency(front)
    if stage is None or rate <= 0.0:
        return None
    return max(0, math.ceil(rate * stage - SLACK))


def excess(gap_now: int, tolerated: int | None) -> int:
    """The part of the gap that is a queue in the front end."""
    return 0 if tolerated is None else max(0, gap_now - tolerated)
