"""Time as an injected dependency.

The gate, the page client and the simulator never call `time` or `asyncio.sleep`
directly: they take a `Clock`. Production uses `MonotonicClock`; benchmarks use
`ScaledClock` to replay a long GPU workload quickly with every timer scaled the same
way; tests use `FakeClock`, which only moves when the test moves it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    """A source of 'now' in seconds and a way to wait, in the same units."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class MonotonicClock:
    """Wall time from `time.monotonic`; the production clock."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def __repr__(self) -> str:
        return "MonotonicClock()"


class LoopClock:
    """The running event loop's own time (`loop.time()`), and `asyncio.sleep`.

    In production this is monotonic time, like MonotonicClock. Under a virtual-time
    loop (pagegate.sim.virtual) it is that loop's virtual time, so the gate, the page
    client and the simulator all read the one clock that timers and timeouts use.
    """

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def __repr__(self) -> str:
        return "LoopClock()"


class WallClock:
    """Epoch seconds from `time.time`: for comparing with times another system recorded
    (Prefect's run states and heartbeats). It follows the system clock's jumps, so
    durations inside one process use MonotonicClock."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def __repr__(self) -> str:
        return "WallClock()"


class ScaledClock:
    """Simulated time running `factor` times faster than wall time.

    With factor 30, a 30 s cooldown passes in 1 s of wall time, and a server model
    driven by the same clock serves 30 simulated seconds of work per wall second.
    """

    def __init__(self, factor: float) -> None:
        if factor <= 0:
            raise ValueError("factor must be positive")
        self.factor = factor
        self._origin = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self._origin) * self.factor

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) / self.factor)

    def __repr__(self) -> str:
        return f"ScaledClock(factor={self.factor})"


class FakeClock:
    """A clock for tests: time stands still until `advance` moves it.

    Sleepers are woken in deadline order when `advance` passes their deadline;
    `advance` then yields to the event loop so woken tasks run before it returns.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), fut))
        await fut

    @property
    def pending_sleepers(self) -> int:
        return sum(1 for _, _, f in self._sleepers if not f.done())

    def next_deadline(self) -> float | None:
        live = [d for d, _, f in self._sleepers if not f.done()]
        return min(live) if live else None

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking sleepers in order, and let woken tasks run."""
        target = self._now + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, fut = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            if not fut.done():
                fut.set_result(None)
            await settle()
        self._now = target
        await settle()

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now}, sleepers={self.pending_sleepers})"


async def settle(rounds: int = 20) -> None:
    """Yield to the event loop enough times for ready tasks to run to their next wait."""
    for _ in range(rounds):
        await asyncio.sleep(0)
