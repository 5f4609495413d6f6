"""The policy's whole state: the parts' frozen states and the page counts they share."""

from __future__ import annotations

from dataclasses import dataclass, field

from pagegate.admission.policy import frontend, limit, pacing
from pagegate.admission.policy.config import GateConfig
from pagegate.admission.policy.conservation import AckClock
from pagegate.admission.policy.frontend import FrontEnd
from pagegate.admission.policy.limit import Concurrency
from pagegate.admission.policy.pacing import Bucket
from pagegate.admission.policy.rates import Rates
from pagegate.admission.policy.signals import Signals
from pagegate.admission.policy.units import Units
from pagegate.server.metrics import Reading


@dataclass(frozen=True, slots=True, kw_only=True)
class GateState:
    """Everything the policy remembers: the parts' states and the page counts they share.

    Build the first one with `initial_state`. The properties are a flat read-only view
    of the parts, for the snapshot, logs and tests.
    """

    started_at: float
    signals: Signals
    concurrency: Concurrency
    bucket: Bucket
    rates: Rates
    units: Units
    front: FrontEnd = field(default_factory=FrontEnd)
    acks: AckClock = field(default_factory=AckClock)
    queued: int = 0                              # pages waiting at the gate
    in_flight: int = 0                           # pages holding a permit
    admitted_total: int = 0
    completed_total: int = 0

    @property
    def reading(self) -> Reading | None:
        return self.signals.reading

    @property
    def last_scrape_ok(self) -> bool:
        return self.signals.last_scrape_ok

    @property
    def peak(self) -> float:
        return self.signals.peak

    @property
    def queue(self) -> float:
        return self.signals.queue

    @property
    def front_latency(self) -> float | None:
        return frontend.latency(self.front)

    @property
    def limit(self) -> int:
        return self.concurrency.limit

    @property
    def slow_start(self) -> bool:
        return self.concurrency.slow_start

    @property
    def cut_running(self) -> int:
        return self.concurrency.cut_running

    @property
    def credits(self) -> tuple[tuple[int, int], ...]:
        return self.units.credits

    @property
    def open_credits(self) -> int:
        return self.units.open_credits

    @property
    def units_released(self) -> int:
        return self.units.units_released

    @property
    def drain_den(self) -> float:
        return self.rates.drain_den


def initial_state(now: float, config: GateConfig) -> GateState:
    return GateState(
        started_at=now,
        signals=Signals(),
        concurrency=limit.start(config),
        bucket=pacing.full(now, config),
        rates=Rates(),
        units=Units(),
    )
