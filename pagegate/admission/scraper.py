"""The gate's scrape task: read the metrics source every poll interval, hand each result over.

The task only scrapes and delivers; the gate's decision loop folds the results into the
policy. A scrape that fails or outlasts scrape_timeout_seconds (on the gate's clock) is
delivered as a failure, never as a zero reading.

Each scrape carries our count of requests on the wire when it started, for the frontend
gap (our requests the engine does not count yet). It counts only requests sent over a
poll interval ago: a holder calls `permit.sent()` right before its HTTP request, so pages
still rendering inside their permit never look like a backlog in the server's front end,
and a request sent a moment before the scrape is in transit, not stuck. A holder that
never calls `sent()` gives no gap signal (the other signals still apply).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pagegate.admission.policy import GateConfig
from pagegate.admission.timing import within
from pagegate.clock import Clock
from pagegate.server.metrics import Reading

MetricsSource = Callable[[], Awaitable[Reading]]
"""An async callable returning a fresh Reading, or raising when none can be had."""


@dataclass(frozen=True, slots=True)
class Scrape:
    reading: Reading
    in_flight_at_start: int  # our requests on the wire when the scrape started


@dataclass(frozen=True, slots=True)
class ScrapeFailure:
    at: float
    error: str


class OnTheWire:
    """When each of our requests left (see the module docstring)."""

    def __init__(self, clock: Clock, poll_interval_seconds: float) -> None:
        self._clock = clock
        self._poll = poll_interval_seconds
        self._sent_at: dict[int, float] = {}  # page serial -> when its request left
        self._serial = 0

    def new_page(self) -> int:
        """A serial for a page just admitted."""
        self._serial += 1
        return self._serial

    def sent(self, serial: int) -> None:
        self._sent_at[serial] = self._clock.now()

    def done(self, serial: int) -> None:
        self._sent_at.pop(serial, None)

    def __call__(self, now: float) -> int:
        """Requests sent over a poll interval ago: the engine should count them by now."""
        cutoff = now - self._poll
        return sum(1 for at in self._sent_at.values() if at < cutoff)


async def poll_forever(
    metrics: MetricsSource,
    clock: Clock,
    config: GateConfig,
    *,
    on_the_wire: Callable[[float], int],
    deliver: Callable[[Scrape | ScrapeFailure], None],
) -> None:
    """Scrape, deliver, sleep one poll interval; until cancelled.

    `on_the_wire(now)` counts our requests the engine should see by now; it is taken
    when the scrape starts, so pages sent while the scrape is in transit do not count.
    """
    while True:
        in_flight = on_the_wire(clock.now())
        try:
            reading = await within(
                metrics(), clock, config.scrape_timeout_seconds, "metrics scrape"
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            deliver(ScrapeFailure(clock.now(), repr(exc)))
        else:
            deliver(Scrape(reading, in_flight))
        await clock.sleep(config.poll_interval_seconds)
