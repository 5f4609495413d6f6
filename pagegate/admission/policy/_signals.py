"""What the gate measures: the readings, the front end, the drain and the page latency.

peak      = max(running, peak x 0.5^(dt / peak_half_life))
queue     = backlog (waiting for capacity, else all waiting) + the front end's excess
gap       = our requests on the wire - (running + waiting)
transit   = area under the gap / max(our sends, requests that left it), each decayed over
            smoothing_polls
latency   = the lowest transit over the last drain window (the stage without a queue)
tolerance = ceil(drain x latency);  excess = max(0, gap - tolerance)
drain     = completions / busy seconds, both decayed over drain_window_seconds (busy: something
            in flight or finished; sampling starts at the first completion)
recent    = the same over smoothing_polls polls
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from pagegate.admission.policy._config import SLACK, GateConfig
from pagegate.server.metrics import Reading


@dataclass(frozen=True, slots=True)
class Ratio:
    """num / den, both decayed alike: a sample scales both by its decay, then adds to them."""

    num: float = 0.0
    den: float = 0.0

    def add(self, decay: float, num: float, den: float) -> Ratio:
        return Ratio(self.num * decay + num, self.den * decay + den)

    def value(self) -> float | None:
        return self.num / self.den if self.den > 0.0 else None


@dataclass(frozen=True, slots=True)
class Signals:
    reading: Reading | None = None               # the newest good reading
    usable_since: float = 0.0                    # the newest usable reading, at first the start
    peak: float = 0.0                            # decayed max of running requests
    queue: float = 0.0                           # backlog + front-end excess, last reading
    generation_moved_at: float | None = None     # when generated tokens last moved, or idle

    def out_of_order(self, reading: Reading) -> bool:
        """A reading older than the newest one (a slow scrape overtaken)."""
        return self.reading is not None and reading.at < self.reading.at

    def fold(self, reading: Reading, front_excess: int, config: GateConfig) -> tuple[Signals, bool]:
        """Fold a good, in-order reading in; also whether a preemption happened since the last."""
        last = self.reading or reading               # the first reading is its own last
        decay = 0.5 ** ((reading.at - last.at) / config.peak_half_life_seconds)
        seen, total = last.preemptions_total, reading.preemptions_total
        preempted = total is not None and seen is not None and total > seen
        generated, busy = reading.generation_tokens_total, reading.running + reading.waiting != 0
        flat = self.reading is not None and generated == last.generation_tokens_total and busy
        moved_at = None if generated is None else self.generation_moved_at if flat else reading.at
        signals = Signals(
            reading=reading, usable_since=self.usable_since,
            peak=max(float(reading.running), self.peak * decay),
            queue=float(reading.backlog + max(0, front_excess)), generation_moved_at=moved_at)
        if signals.usable(config):
            signals = replace(signals, usable_since=reading.at)
        return signals, preempted

    def stalled(self, config: GateConfig) -> bool:
        """The engine holds work but has generated nothing for a drain window."""
        if self.reading is None or self.generation_moved_at is None:
            return False
        return self.reading.at - self.generation_moved_at > config.drain_window_seconds

    def usable(self, config: GateConfig) -> bool:
        """The newest reading may steer C and counts as the server being there."""
        return self.reading is not None and self.reading.healthy and not self.stalled(config)

    def stale(self, now: float, config: GateConfig) -> bool:
        """The newest good reading is older than stale_after (True when there is none)."""
        return self.reading is None or now - self.reading.at > config.stale_after_seconds


@dataclass(frozen=True, slots=True)
class FrontEnd:
    at: float | None = None                      # time of the last sample
    gap: float = 0.0                             # the gap at the last sample
    sent_seen: int = 0                           # our sends counted up to `at`
    held: Ratio = Ratio()                        # the gap's area (request-seconds) / entries
    latencies: tuple[tuple[float, float], ...] = ()  # (at, transit), last drain window

    def fold(self, at: float, gap_now: int, sent_total: int, config: GateConfig) -> FrontEnd:
        """One reading's sample: the gap when its scrape started and our sends up to then."""
        if self.at is None or at <= self.at or sent_total < self.sent_seen:
            return FrontEnd(at, float(gap_now), sent_total, self.held, self.latencies)
        dt = at - self.at
        decay = math.exp(-dt / (config.tuning.smoothing_polls * config.poll_interval_seconds))
        area = 0.5 * (self.gap + gap_now) * dt  # the trapezoid between samples
        sent = sent_total - self.sent_seen
        left = sent - (gap_now - self.gap)
        held = self.held.add(decay, area, max(sent, left))
        window = config.drain_window_seconds
        latencies = tuple((t, w) for t, w in self.latencies if at - t <= window)
        if held.den > 0.0:
            latencies = (*latencies, (at, held.num / held.den))
        return FrontEnd(at, float(gap_now), sent_total, held, latencies)

    def stage_latency(self) -> float | None:
        """The stage's latency without a queue: the lowest transit over the drain window."""
        return min((w for _, w in self.latencies), default=None)

    def transit(self) -> float:
        """How long a request sent now takes to reach the engine (0: unknown)."""
        return self.held.value() or 0.0

    def tolerance(self, rate: float) -> int | None:
        """Requests the stage holds at `rate` pages/s without a queue (None: not known yet)."""
        stage = self.stage_latency()
        if stage is None or rate <= 0.0:
            return None
        return max(0, math.ceil(rate * stage - SLACK))

    def excess(self, gap_now: int, rate: float) -> int:
        """The part of the gap that is a queue in the front end (0: no tolerance known yet)."""
        tolerated = self.tolerance(rate)
        return 0 if tolerated is None else max(0, gap_now - tolerated)


def gap(on_wire: int, reading: Reading) -> int:
    """Our requests the engine does not count yet (0 when it counts more)."""
    return max(0, on_wire - (reading.running + reading.waiting))


@dataclass(frozen=True, slots=True)
class Rates:
    drain: Ratio = Ratio()                       # completions / busy seconds
    recent: Ratio = Ratio()                      # the same over smoothing_polls
    drain_at: float | None = None                # time of the last drain sample
    drain_completed: int = 0                     # completions counted up to drain_at
    latency: Ratio = Ratio()                     # mean time in flight of completed pages
    latency_at: float | None = None              # time of the last timed completion

    def sample(self, at: float, completed_total: int, in_flight: int, config: GateConfig) -> Rates:
        """Fold the completions since the last sample into the drain (one sample per reading)."""
        sampled = replace(self, drain_at=at, drain_completed=completed_total)
        dt = 0.0 if self.drain_at is None else at - self.drain_at
        finished = completed_total - self.drain_completed
        if not (dt > 0 and completed_total > 0 and (finished > 0 or in_flight > 0)):
            return sampled
        decay = math.exp(-dt / config.drain_window_seconds)
        recent = math.exp(-dt / (config.tuning.smoothing_polls * config.poll_interval_seconds))
        return replace(sampled, drain=self.drain.add(decay, finished, dt),
                       recent=self.recent.add(recent, finished, dt))

    def add_latency(self, latency: float, now: float, config: GateConfig) -> Rates:
        """Fold one completed page's time in flight into the decayed mean."""
        gone = 0.0 if self.latency_at is None else max(0.0, now - self.latency_at)
        decay = math.exp(-gone / config.drain_window_seconds)
        latencies = self.latency.add(decay, max(0.0, latency), 1.0)
        return replace(self, latency=latencies, latency_at=now)

    def drain_rate(self) -> float:
        """In pages/s (0 before any)."""
        return self.drain.value() or 0.0

    def pace(self, config: GateConfig) -> float:
        """The token bucket's refill in pages/s:
        max(pace_min_rate, pace_gain x max(drain, recent))."""
        drain = max(self.drain_rate(), self.recent.value() or 0.0)
        return max(config.tuning.pace_min_rate, config.tuning.pace_gain * drain)
