"""What the readings say: the peak, the queue, freshness and stalls.

peak = max(running, peak x 0.5^(dt / peak_half_life))
queue = backlog (waiting for capacity, else all waiting) + the front end's excess
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pagegate.admission.policy._config import GateConfig
from pagegate.admission.policy._units import Reason
from pagegate.server.metrics import Reading


@dataclass(frozen=True, slots=True)
class Signals:
    reading: Reading | None = None               # the newest good reading
    last_scrape_ok: bool = False                 # False after a failed scrape
    last_usable_at: float | None = None          # the newest reading that allowed admission
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
    """Fold a good, in-order reading in; also whether a preemption happened since the last."""
    previous = signals.reading
    peak = float(reading.running)
    if previous is not None:
        decay = 0.5 ** ((reading.at - previous.at) / config.peak_half_life_seconds)
        peak = max(peak, signals.peak * decay)
    preempted = (
        reading.preemptions_total is not None
        and signals.preemptions_seen is not None
        and reading.preemptions_total > signals.preemptions_seen
    )
    signals = Signals(
        reading=reading,
        last_scrape_ok=True,
        last_usable_at=signals.last_usable_at,
        peak=peak,
        queue=float(reading.backlog + max(0, front_excess)),
        preemptions_seen=reading.preemptions_total,
        **_generation(signals, reading),
    )
    if usable(signals, config):
        signals = replace(signals, last_usable_at=reading.at)
    return signals, preempted


def _generation(signals: Signals, reading: Reading) -> dict[str, float | None]:
    """When generated tokens last moved (or the server was idle)."""
    generated = reading.generation_tokens_total
    if generated is None:
        return {"generation_seen": None, "generation_moved_at": None}
    idle = reading.running + reading.waiting == 0
    moved = signals.generation_seen is None or generated != signals.generation_seen or idle
    return {"generation_seen": generated,
            "generation_moved_at": reading.at if moved else signals.generation_moved_at}


def stalled(signals: Signals, config: GateConfig) -> bool:
    """The engine holds work but has generated nothing for a drain window (hung)."""
    if signals.reading is None or signals.generation_moved_at is None:
        return False
    return signals.reading.at - signals.generation_moved_at > config.drain_window_seconds


def usable(signals: Signals, config: GateConfig) -> bool:
    """The newest reading may steer C and counts as the server being there."""
    reading = signals.reading
    return reading is not None and reading.healthy and not stalled(signals, config)


def stale(signals: Signals, now: float, config: GateConfig) -> bool:
    """The newest good reading is older than stale_after (True when there is none)."""
    return signals.reading is None or now - signals.reading.at > config.stale_after_seconds


def pause_reason(signals: Signals, now: float, config: GateConfig) -> Reason | None:
    """Why the readings pause page dispatch now (one failed scrape on a fresh reading does not)."""
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
    """Why the readings forbid a release: dispatch must be open and the last scrape good."""
    if signals.reading is not None and not signals.last_scrape_ok:
        return Reason.SCRAPE_FAILED
    return pause_reason(signals, now, config)
