"""The production page path against the simulator, in virtual time: exact and repeatable.

What runs is what users run, unmodified: an `Admission` (the `Gate` with its scraper and
`MetricsPoller`, or a baseline), `PageOcr` and `PageClient` over httpx. They talk to the
simulator's own ASGI app (app.py over the pure `NodeModel`: engines, front end, /metrics
behind the front end, gauges one step late) through `SimTransport`, in one process.

No wall clock anywhere. The event loop is looptime's (PyPI; written for Kopf's tests):
its `time()` is virtual, and when nothing is ready it jumps to the next timer instead of
sleeping. Every component takes `LoopClock`, so the gate's cooldown, the client's
backoff and request timeout, the simulator's engine steps and the scrape latency all
move on that one clock. CPU work costs no virtual time, so a run measures the policy and
the server, never this machine. One seed gives one trace, bit for bit.

`run_virtual(engine, strategy, workload)` is the one driver; bench.admission, the
yardstick (yardstick.py) and the tests call it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import httpx
import looptime

from pagegate.admission.base import Admission
from pagegate.clock import Clock, LoopClock
from pagegate.config import RunConfig
from pagegate.ocr.client import PageClient
from pagegate.ocr.page import PageOcr
from pagegate.ocr.stats import RunStats
from pagegate.sim.app import build_app
from pagegate.sim.config import SimConfig
from pagegate.sim.driver import SimEngine
from pagegate.sim.measure import Metered
from pagegate.sim.profiles import ServerProfile
from pagegate.sim.synthetic import (
    SyntheticGroup,
    SyntheticRenderer,
    blank_page_png,
    synthetic_groups,
)
from pagegate.sim.transport import SimTransport
from pagegate.sim.workload import LETTER_PAGE_PX
from pagegate.vlm.profiles import DEFAULT_PROFILE, get_profile

SERVER = "http://sim.invalid"
"""The simulator's origin inside the virtual world (never resolved: no socket is opened)."""
SAMPLE_EVERY_S = 1.0
"""Trace resolution: the server's gauges and the client's counts, every virtual second."""


# ------------------------------------------------------------------ the inputs


@dataclass(frozen=True)
class Workload:
    """The pages: `pages` cut into groups of `group_pages`, every page handed over at
    t = 0 (each group fires all its pages at once, as olmOCR's workers do). `seed` is
    the server's: it prices each page's output length."""

    pages: int
    group_pages: int = 500
    seed: int = 0
    page_px: tuple[int, int] = LETTER_PAGE_PX  # each page image's size (sim/model_engines.py)

    def groups(self) -> list[SyntheticGroup]:
        return synthetic_groups(self.pages, self.group_pages)


@dataclass(frozen=True)
class Site:
    """What a strategy may use to build its admission inside the virtual world."""

    http: httpx.AsyncClient
    metrics_url: str
    clock: Clock
    groups: Sequence[SyntheticGroup]
    engine: Callable[[], SimEngine]
    """The simulator's engine now: for baselines that read vLLM's periodic log line,
    which no HTTP endpoint serves."""


@dataclass
class Opened:
    """A strategy's admission, and what it needs to hear when a group is done."""

    admission: Admission
    group_done: Callable[[str], None] | None = None
    limit: Callable[[], float | None] = lambda: None
    """The admission's current limit, for the trace (the gate's C)."""


Strategy = Callable[[Site], AbstractAsyncContextManager[Opened]]
"""Builds an admission in the running (virtual) loop; closes it on exit."""


class World:
    """The simulated server side of a run, as a fault sees it (faults.py).

    `transport.app` None is a server process that is down; `restart()` brings up a
    fresh server (a new engine, empty queues) on the same clock, as a supervisor
    restarting `vllm serve` would. `kill(reason)` is an injected death: it does not end
    the run, where a death of overload does (`overloaded` is set).
    """

    def __init__(self, profile: ServerProfile, config: SimConfig, clock: Clock) -> None:
        self.profile = profile
        self.config = config
        self.clock = clock
        self.engines: list[SimEngine] = []
        self.overloaded = asyncio.Event()
        self.crash_reasons: list[str] = []
        self._killing = False
        self.transport = SimTransport(None)
        self.restart()

    @property
    def engine(self) -> SimEngine:
        return self.engines[-1]

    def restart(self) -> None:
        engine = SimEngine(self.config, self.clock, profile=self.profile, min_wake_s=0.0)
        engine.on_crash(lambda: self._died(engine))
        self.engines.append(engine)
        self.transport.app = build_app(self.config, engine=engine)

    def kill(self, reason: str) -> None:
        """An injected engine death: requests in flight fail, the port closes."""
        self._killing = True
        try:
            self.engine.node.kill(reason, self.clock.now())
            self.engine.refresh()
        finally:
            self._killing = False
        self.transport.app = None

    def _died(self, engine: SimEngine) -> None:
        if not self._killing:
            self.crash_reasons.append(engine.node.crash_reason or "engine died")
            self.overloaded.set()

    async def stop(self) -> None:
        for engine in self.engines:
            await engine.stop()

Fault = Callable[[World], Awaitable[None]]
"""A fault on a schedule: a coroutine started at t = 0 that sleeps on `world.clock`
until its time, then acts on the world (faults.py)."""


# ------------------------------------------------------------------ the result


@dataclass(frozen=True)
class Run:
    """One strategy on one engine, in virtual seconds from the hand-over at t = 0."""

    engine: str
    strategy: str
    pages: int
    seed: int
    pages_done: int
    """Pages answered by the model (fallback pages are not done)."""
    elapsed_s: float
    """Time of the last page done; the crash or the budget's end if the run stopped."""
    end: str
    """'finished', 'crashed' or 'timed_out'."""
    crash_reason: str | None
    preemptions: int
    peak_waiting: int
    peak_kv_usage: float
    peak_in_flight: int
    capacity_retries: int
    done_at: tuple[float, ...]
    trace: tuple[tuple[float, int, int, float, int, float | None], ...]
    """(t, waiting, running, kv usage, client in flight, admission limit) per sample."""
    snapshot: dict[str, Any] = field(default_factory=dict)
    admitted_at: tuple[float, ...] = ()
    """When the admission granted each slot (a page's retry takes a slot again)."""
    latencies: tuple[float, ...] = ()
    """Seconds from slot to answer of every request answered OK: a page's time in flight."""

    @property
    def crashed(self) -> bool:
        return self.end == "crashed"

    @property
    def pages_per_s(self) -> float:
        return self.pages_done / self.elapsed_s if self.elapsed_s > 0 else 0.0


# ------------------------------------------------------------------ the driver


RESOLUTION_S = 1e-6
"""The virtual clock's tick (looptime keeps time as an integer count of these)."""


class VirtualLoop(looptime.make_event_loop_class(asyncio.SelectorEventLoop)):  # type: ignore[misc]
    """looptime's loop, with every timer rounded up to the next tick.

    A timer due less than a tick from now would otherwise fire at the same virtual
    instant; a loop that sleeps "until the next event" (the simulator's engine, the
    gate) would then wake, find the event still ahead, and sleep again without time
    ever moving. On the wall clock that spin lasts microseconds; here it never ends.
    """

    def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> Any:
        now_ticks = round(self.time() / RESOLUTION_S)
        ticks = math.ceil(when / RESOLUTION_S - 1e-3)
        if when > self.time():
            ticks = max(ticks, now_ticks + 1)
        return super().call_at(ticks * RESOLUTION_S, callback, *args, context=context)


def run_virtual(
    profile: ServerProfile,
    strategy: Strategy,
    workload: Workload,
    *,
    strategy_name: str = "",
    budget_s: float | None = None,
    faults: Sequence[Fault] = (),
) -> Run:
    """Run every page of `workload` through `strategy` against `profile`, in virtual time.

    Stops when every page is done, the server dies of overload, or `budget_s` virtual
    seconds pass. `faults` run alongside (faults.py).
    """
    loop = VirtualLoop(start=0.0, noop_cycles=1, resolution=RESOLUTION_S)
    try:
        run: Run = loop.run_until_complete(
            _run(profile, strategy, workload, strategy_name=strategy_name, budget_s=budget_s,
                 faults=faults)
        )
        return run
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


async def _run(
    profile: ServerProfile,
    strategy: Strategy,
    workload: Workload,
    *,
    strategy_name: str,
    budget_s: float | None,
    faults: Sequence[Fault],
) -> Run:
    clock = LoopClock()
    config = SimConfig(seed=workload.seed)
    world = World(profile, config, clock)
    groups = workload.groups()
    renderer = SyntheticRenderer(blank_page_png(*workload.page_px))
    done_at: list[float] = []
    trace: list[tuple[float, int, int, float, int, float | None]] = []
    stats = RunStats(started_at=clock.now())
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(transport=world.transport, base_url=SERVER, limits=limits) as http:
        site = Site(http, f"{SERVER}/metrics", clock, groups, lambda: world.engine)
        async with strategy(site) as opened:
            metered = Metered(opened.admission, clock)
            pages = PageOcr(
                client=PageClient(http, f"{SERVER}/v1",
                                  timeout_seconds=RunConfig.request_timeout_seconds),
                admission=metered,
                renderer=renderer,
                profile=get_profile(DEFAULT_PROFILE),
                model=config.served_model_name,
                clock=clock,
                stats=stats,
                max_attempts=RunConfig.max_page_retries,
                unavailable_after_seconds=RunConfig.server_unavailable_after_seconds,
                rng=random.Random(workload.seed),
            )

            async def one_page(group: SyntheticGroup, index: int) -> None:
                result = await pages.run(group.document, index, group.group_id)
                if not result.is_fallback:
                    done_at.append(clock.now())

            async def one_group(group: SyntheticGroup) -> None:
                await asyncio.gather(
                    *(one_page(group, i) for i in range(group.document.page_count)),
                    return_exceptions=True)
                if opened.group_done is not None:
                    opened.group_done(group.group_id)

            async def sample() -> None:
                while True:
                    s = world.engine.node.snapshot()
                    trace.append((clock.now(), s.waiting, s.running, round(s.kv_usage, 4),
                                  metered.in_flight, opened.limit()))
                    await clock.sleep(SAMPLE_EVERY_S)

            work = asyncio.ensure_future(asyncio.gather(*(one_group(g) for g in groups)))
            helpers = [asyncio.ensure_future(sample())]
            helpers += [asyncio.ensure_future(fault(world)) for fault in faults]
            death = asyncio.ensure_future(world.overloaded.wait())
            waits: set[asyncio.Future[Any]] = {work, death}
            if budget_s is not None:
                waits.add(asyncio.ensure_future(clock.sleep(budget_s)))
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            crashed = world.overloaded.is_set()
            end = "crashed" if crashed else ("finished" if work.done() else "timed_out")
            ended_at = clock.now()
            for task in (*waits, *helpers):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            snapshot = opened.admission.snapshot()
    await world.stop()
    nodes = [e.node.snapshot() for e in world.engines]
    if end == "finished":
        elapsed = max(done_at, default=0.0)
    else:
        done_at = [t for t in done_at if t <= ended_at]
        elapsed = ended_at
    one_engine = len(nodes) == 1 and len(nodes[0].engines) == 1
    return Run(
        engine=profile.name,
        strategy=strategy_name,
        pages=workload.pages,
        seed=workload.seed,
        pages_done=len(done_at),
        elapsed_s=elapsed,
        end=end,
        crash_reason=world.crash_reasons[0] if world.crash_reasons else None,
        preemptions=sum(n.preemptions_total for n in nodes),
        # One engine keeps an exact high-water mark; several only sum per sample.
        peak_waiting=nodes[0].engines[0].peak_waiting if one_engine
        else max((row[1] for row in trace), default=0),
        peak_kv_usage=max(e.peak_kv_usage for n in nodes for e in n.engines),
        peak_in_flight=metered.peak_in_flight,
        capacity_retries=stats.capacity_retries,
        done_at=tuple(done_at),
        trace=tuple(trace),
        snapshot=snapshot,
        admitted_at=tuple(metered.admitted_at),
        latencies=tuple(metered.latencies),
    )
