"""What the server's readings say: the peak, the queue, freshness, stalls, and pauses.

The peak is the decayed maximum of *running* requests: the batch the server has shown
it can hold (waiting measures overload, not capacity). The queue the limit steers on is
the server's backlog (the requests waiting for scheduling room: reason `capacity` where
the server splits its waiting count by reason, all of it otherwise) plus the front end's
excess: our requests the engine does not count yet beyond what the front end holds as a
pipeline stage (frontend.py). A reading
is usable when the server reports itself healthy and its generated-token counter has
moved recently while it held work; page dispatch pauses while it is not, or while the
newest reading is stale. A failed scrape is a missing reading, never a zero one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pagegate.admission.policy.config import GateConfig
from pagegate.admission.policy.reasons import Reason
from pagegate.server.metrics import Reading


@dataclass(frozen=True, slots=True)
class Signals:
    """What the policy keeps of the readings."""

    reading: Reading | None = None               # the newest good reading
    last_scrape_ok: bool = False                 # False after a failed scrape
    last_usable_at: float | None = None          # newest reading that allowed admission
    peak: float = 0.0                            # decayed max of running requests
    queue: float = 0.0                           # backlog + front-end excess, last reading
    preemptions_seen: float | None = None
    generation_seen: float | None = None
    generation_moved_at: float | None = None


def out_of_order(signals: Signals, reading: Reading) -> bool:
    """A reading older than the newest one (a slow scrape overtaken): ignore it."""
    return signals.reading is not None and reading.at < signals.reading.at


def fold(
    signals: Signals, reading: Reading, front_excess: int, config: GateConfig
) -> tuple[Signals, bool]:
    """Fold a good, in-order reading in; returns the new signals and whether a preemption
    happened since the previous reading.

    `front_excess` is the part of the front-end gap that is a queue (frontend.excess).
    """
    previous = signals.reading
    peak = float(reading.running)
    if previous is not None:
        decay = 0.5 ** ((reading.at - previous.at) / config.peak_half_life_seconds)  # half-life
        peak = max(peak, signals.peak * decay)
    preempted = (
        reading.preemptions_total is not None
        and signals.preemptions_seen is not None
        and reading.preemptions_total > signals.preemptions_seen
    )
    generation_seen, generation_moved_at = _track_generation(signals, reading)
    queue = reading.backlog + max(0, front_excess)
    signals = replace(
        signals,
        reading=reading,
        last_scrape_ok=True,
        peak=peak,
        queue=float(queue),
        preemptions_seen=reading.preemptions_total,
        generation_seen=generation_seen,
        generation_moved_at=generation_moved_at,
    )
    if usable(signals, config):
        signals = replace(signals, last_usable_at=reading.at)
    return signals, preempted


def scrape_failed(signals: Signals) -> Signals:
    return replace(signals, last_scrape_ok=False)


def _track_generation(signals: Signals, reading: Reading) -> tuple[float | None, float | None]:
    """Remember when generated tokens last moved (or the server was idle)."""
    generated = reading.generation_tokens_total
    if generated is None:
        return None, None
    idle = reading.running + reading.waiting == 0
    if signals.generation_seen is None or generated != signals.generation_seen or idle:
        return generated, reading.at
    return generated, signals.generation_moved_at


def stalled(signals: Signals, config: GateConfig) -> bool:
    """The engine holds work but has generated nothing for stall_after seconds (hung)."""
    stall_after = config.tuning.stall_after_seconds
    if stall_after is None or signals.reading is None or signals.generation_moved_at is None:
        return False
    return signals.reading.at - signals.generation_moved_at > stall_after


def usable(signals: Signals, config: GateConfig) -> bool:
    """The newest reading may steer C and count as the server being there."""
    reading = signals.reading
    return reading is not None and reading.healthy and not stalled(signals, config)


def stale(signals: Signals, now: float, config: GateConfig) -> bool:
    """The newest good reading is older than stale_after (True when there is none)."""
    reading = signals.reading
    return reading is None or now - reading.at > config.stale_after_seconds


def pause_reason(signals: Signals, now: float, config: GateConfig) -> Reason | None:
    """Why page dispatch is paused now, or None when pages may flow.

    Dispatch tolerates one failed scrape as long as the newest good reading is fresh;
    releases are stricter (`release_hold`).
    """
    reading = signals.reading
    if reading is None:
        return Reason.NO_READING
    if stale(signals, now, config):
        return Reason.STALE
    if not reading.healthy:
        return Reason.UNHEALTHY
    if stalled(signals, config):
        return Reason.STALLED
    return None


def release_hold(signals: Signals, now: float, config: GateConfig) -> Reason | None:
    """Why the readings forbid a release now: a release needs the latest scrape to have
    succeeded as well as dispatch to be open."""
    if signals.reading is None:
        return Reason.NO_READING
    if not signals.last_scrape_ok:
        return Reason.SCRAPE_FAILED
    return pause_reason(signals, now, config)


def usable_since(signals: Signals, started_at: float) -> float:
    """Since when the gate has had no usable reading, if it is paused now."""
    return signals.last_usable_at if signals.last_usable_at is not None else started_at
