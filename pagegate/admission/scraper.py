"""The gate's scrape task: read the metrics source every poll interval, hand each result over.

The task only scrapes and delivers each result to the gate. A scrape that fails or outlasts
scrape_timeout_seconds (on the gate's clock) is delivered as a failure, never as a zero
reading: the gate keeps its error and steps the policy with time passing.

Each scrape carries our count of requests on the wire when it started and how many we
had sent in all by then, for the front end as a pipeline stage (policy/_signals.py: our
requests the engine does not count yet, and how long they take to reach it). A holder
calls `permit.sent()` right before its HTTP request, so pages still rendering inside
their permit are not on the wire. A holder that never calls `sent()` gives no front-end
signal (the other signals still apply).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pagegate.admission.policy import GateConfig, Scraped
from pagegate.admission.timing import within
from pagegate.clock import Clock
from pagegate.server.metrics import Reading

MetricsSource = Callable[[], Awaitable[Reading]]
"""An async callable returning a fresh Reading, or raising when none can be had."""


@dataclass(frozen=True, slots=True)
class ScrapeFailed:
    """A scrape failed or timed out; `error` says how."""

    error: str


class OnTheWire:
    """Our requests on the wire and how many were sent (see the module docstring)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._sent_at: dict[int, float] = {}  # page serial -> when its request left
        self._serial = 0
        self.sent_total = 0

    def new_page(self) -> int:
        """A serial for a page just admitted."""
        self._serial += 1
        return self._serial

    def sent(self, serial: int) -> None:
        if serial not in self._sent_at:
            self.sent_total += 1
        self._sent_at[serial] = self._clock.now()

    def done(self, serial: int) -> None:
        self._sent_at.pop(serial, None)

    def __call__(self) -> tuple[int, int]:
        """(requests on the wire now, requests sent in all)."""
        return len(self._sent_at), self.sent_total


async def poll_forever(
    metrics: MetricsSource,
    clock: Clock,
    config: GateConfig,
    *,
    on_the_wire: Callable[[], tuple[int, int]],
    deliver: Callable[[Scraped | ScrapeFailed], None],
) -> None:
    """Scrape, deliver, sleep one poll interval; until cancelled.

    `on_the_wire()` gives (our requests on the wire, our requests sent in all); it is
    taken when the scrape starts, so pages sent while the scrape is in transit do not
    count.
    """
    while True:
        in_flight, sent = on_the_wire()
        try:
            reading = await within(
                metrics(), clock, config.scrape_timeout_seconds, "metrics scrape"
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            deliver(ScrapeFailed(repr(exc)))
        else:
            deliver(Scraped(reading, in_flight, sent))
        await clock.sleep(config.poll_interval_seconds)
