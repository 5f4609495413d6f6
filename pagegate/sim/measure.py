"""What a virtual run measures on the client's side: requests in flight, their latency,
and the steady completion rate."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from pagegate.admission.base import Admission, AdmissionSignals, Outcome, Permit, settled
from pagegate.clock import Clock


class Metered:
    """Wraps any Admission to count the client's requests in flight and time each one."""

    def __init__(self, inner: Admission, clock: Clock) -> None:
        self.inner = inner
        self.clock = clock
        self.in_flight = 0
        self.peak_in_flight = 0
        self.latencies: list[float] = []
        self.admitted_at: list[float] = []
        self.outcomes = {o.value: 0 for o in Outcome}
        self.on_server_error: Callable[[], None] | None = None
        """Called on a CONTENT outcome: against a fault-free simulator, a 500 of a dead engine."""

    def slot(self, group_id: str) -> AbstractAsyncContextManager[Permit]:
        return self._slot(group_id)

    @asynccontextmanager
    async def _slot(self, group_id: str) -> AsyncIterator[Permit]:
        async with self.inner.slot(group_id) as permit:
            started = self.clock.now()
            self.admitted_at.append(started)
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            tap = _TapPermit(permit)

            def settle(outcome: Outcome) -> None:
                self.in_flight -= 1
                self.outcomes[outcome.value] += 1
                if outcome is Outcome.OK:
                    self.latencies.append(self.clock.now() - started)
                elif outcome is Outcome.CONTENT and self.on_server_error is not None:
                    self.on_server_error()

            with settled(tap, settle):
                yield tap

    def signals(self, now: float) -> AdmissionSignals:
        return self.inner.signals(now)

    def snapshot(self) -> dict[str, Any]:
        return self.inner.snapshot()


class _TapPermit:
    __slots__ = ("inner", "outcome")

    def __init__(self, inner: Permit) -> None:
        self.inner = inner
        self.outcome: Outcome | None = None

    def finish(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.inner.finish(outcome)

    def sent(self) -> None:
        self.inner.sent()



def steady_rate(done_at: Sequence[float]) -> float:
    """Pages per second over the middle half of the pages (no ramp, no drain); 0 if too few."""
    done = sorted(done_at)
    first, last = len(done) // 4, 3 * len(done) // 4
    span = done[last] - done[first] if last < len(done) else 0.0
    return (last - first) / span if span > 0 else 0.0
