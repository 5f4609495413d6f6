"""The admission strategies a virtual run can put in front of the server.

- `pagegate`: the production `Gate`, default `GateConfig`, scraping /metrics through its
  production `MetricsPoller` (over the virtual transport, so scrapes wait behind the
  simulated API server like real ones).
- `olmocr-2024`: olmOCR's work-group semaphore (baselines.py), reading vLLM's stats line,
  which vLLM logs every 10 s; here a task reads the simulated engine's gauges every 10 s.
- `fixed-1600`: olmOCR's `--max_concurrent_requests` default, a fixed limit.
- `deep-queue`: every page at once.
- `fixed(c)`: a closed loop of `c`; the yardstick's sweep runs these on the pure model.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from pagegate.admission import FixedLimit, Gate, GateConfig
from pagegate.admission.metrics import MetricsPoller
from pagegate.sim.baselines import VLLM_LOG_INTERVAL_S, LogLine, NoLimit, OlmocrGroupSemaphore
from pagegate.sim.virtual import Opened, Site, Strategy

OLMOCR_FIXED_LIMIT = 1600
"""olmOCR's --max_concurrent_requests default (allenai/olmocr olmocr/pipeline.py)."""


def gate(config: GateConfig | None = None) -> Strategy:
    """The production gate with `config` (default: `GateConfig()`, what users run)."""
    settings = config or GateConfig()

    @asynccontextmanager
    async def open_gate(site: Site) -> AsyncIterator[Opened]:
        poller = MetricsPoller(site.metrics_url, timeout_seconds=settings.scrape_timeout_seconds,
                               clock=site.clock, client=site.http)
        async with Gate(settings, poller, site.clock) as the_gate:
            yield Opened(the_gate, limit=lambda: float(the_gate.state.concurrency.limit))

    return open_gate


def fixed(limit: int) -> Strategy:
    """At most `limit` pages in flight: a closed loop."""

    @asynccontextmanager
    async def open_fixed(site: Site) -> AsyncIterator[Opened]:
        yield Opened(FixedLimit(limit), limit=lambda: float(limit))

    return open_fixed


@asynccontextmanager
async def deep_queue(site: Site) -> AsyncIterator[Opened]:
    """Every page straight to the server."""
    yield Opened(NoLimit())


@asynccontextmanager
async def olmocr_2024(site: Site) -> AsyncIterator[Opened]:
    """olmOCR's semaphore over 20 workers, fed vLLM's stats line every 10 s."""
    latest = LogLine(running=0, waiting=0)  # olmOCR's variables before the first line

    async def log_lines() -> None:
        nonlocal latest
        while True:
            await site.clock.sleep(VLLM_LOG_INTERVAL_S)
            snapshot = site.engine().node.snapshot()
            if not snapshot.crashed:
                latest = LogLine(running=snapshot.running, waiting=snapshot.waiting)

    async def line() -> LogLine:
        return latest

    printer = asyncio.ensure_future(log_lines())
    semaphore = OlmocrGroupSemaphore([g.group_id for g in site.groups], line, site.clock,
                                     log_interval_seconds=1.0)
    await semaphore.start()
    try:
        yield Opened(semaphore, semaphore.group_done,
                     limit=lambda: float(semaphore.snapshot()["groups_started"]))
    finally:
        await semaphore.aclose()
        printer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await printer


STRATEGIES: dict[str, Callable[[], Strategy]] = {
    "pagegate": gate,
    "olmocr-2024": lambda: olmocr_2024,
    "fixed-1600": lambda: fixed(OLMOCR_FIXED_LIMIT),
    "deep-queue": lambda: deep_queue,
}
"""Every strategy bench.admission compares, by name, built fresh for each run."""
