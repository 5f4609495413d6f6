"""The server's front end as a pipeline stage: how many of our requests it needs to stay busy.

vLLM's API server reads each request, decodes and preprocesses its image (one multimodal
executor thread per API process) and only then hands it to the engine, which counts it
in running or waiting one engine step later. Requests in that stage are in no gauge: the
*gap*, our requests on the wire less the engine's running + waiting. Some gap is the
pipeline itself: a stage with latency L passing X requests a second holds X x L of them
(Little's law). Only the excess over that is a queue.

The stage's latency is measured by Little's law too: the gap integrated over time (the
area under it) divided by the requests that entered meanwhile (our sends), both
exponentially weighted over `frontend_smoothing_polls` poll intervals. That figure
includes time spent queued in the stage, so allowing "rate x measured latency" would
allow whatever gap there is: a stage that is the bottleneck would fill without limit.
The estimate used is therefore the lowest of these latencies over the last drain window,
as a BBR sender takes the lowest round-trip time over a window as the path's delay
without queues (Cardwell et al., "BBR: Congestion-Based Congestion Control", ACM Queue
2016). Holding the gap at rate x that minimum keeps the stage fed without a queue in it;
the limit's waiting band (limit.py) adds the small queue in front of whichever stage
binds.

Until the first completion gives a rate and the first sends give a latency there is no
tolerance, and the gap is no signal (the start is bounded by C's start and growth on
completions). A negative gap (another tenant's requests in the engine) is no signal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from pagegate.admission.policy.config import GateConfig
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
    latencies: tuple[tuple[float, float], ...] = ()  # (at, Little's latency), last drain window


def gap(on_wire: int, reading: Reading) -> int:
    """Our requests the engine does not count yet (0 when it counts more: other tenants)."""
    return max(0, on_wire - (reading.running + reading.waiting))


def fold(front: FrontEnd, at: float, gap_now: int, sent_total: int, config: GateConfig) -> FrontEnd:
    """One reading's sample: the gap when its scrape started and our sends up to then."""
    if front.at is None or at <= front.at or sent_total < front.sent_seen:
        return replace(front, at=at, gap=float(gap_now), sent_seen=sent_total)
    dt = at - front.at
    tau = config.tuning.frontend_smoothing_polls * config.poll_interval_seconds
    decay = math.exp(-dt / tau)
    area = front.area * decay + 0.5 * (front.gap + gap_now) * dt  # trapezoid between samples
    entered = front.entered * decay + (sent_total - front.sent_seen)
    latencies = tuple(
        (t, w) for t, w in front.latencies if at - t <= config.drain_window_seconds
    )
    if entered >= config.tuning.frontend_min_entered:
        latencies = (*latencies, (at, area / entered))
    return FrontEnd(at=at, gap=float(gap_now), sent_seen=sent_total, area=area,
                    entered=entered, latencies=latencies)


def latency(front: FrontEnd) -> float | None:
    """The stage's latency without a queue: the lowest measured over the drain window."""
    return min((w for _, w in front.latencies), default=None)


def transit(front: FrontEnd, config: GateConfig) -> float:
    """How long a request we send now takes to reach the engine: the newest Little's-law
    latency, queueing in the stage included (0 until measured)."""
    if front.entered < config.tuning.frontend_min_entered:
        return 0.0
    return front.area / front.entered


def tolerance(front: FrontEnd, rate: float) -> int | None:
    """Requests the stage holds at `rate` pages/s without a queue (None: not known yet)."""
    stage = latency(front)
    if stage is None or rate <= 0.0:
        return None
    return max(0, math.ceil(rate * stage - SLACK))


def excess(gap_now: int, tolerated: int | None) -> int:
    """The part of the gap that is a queue in the front end."""
    return 0 if tolerated is None else max(0, gap_now - tolerated)
