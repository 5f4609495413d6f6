"""Faults on a schedule, in virtual time: what goes wrong with a vLLM server mid-run.

Each constructor returns a `Fault` (virtual.py): a coroutine that `run_virtual` starts at
t = 0, which sleeps on the world's clock until its time, acts on the `World` and, for a
fault that lasts, undoes what it did when its time is up. The faults are plain closures
with no state of their own between runs, so one `Fault` serves any number of runs.

Two kinds:
- in the server (pure model, node.py): a calm engine stall, a front-end stall, a crash
  and restart;
- between client and server (an `Interposer` on `SimTransport`, as a proxy would sit):
  slow or failing /metrics, bursts of the queue cap's 503.

`SCHEDULES` names one schedule per fault (issue 30, item 5), each starting at `FAULT_AT`,
once the gate has reached its steady state on rtx4090.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import httpx

from pagegate.sim.node import queue_cap_message
from pagegate.sim.transport import Interposer, Send
from pagegate.sim.virtual import Fault, Workload, World

FAULT_AT = 120.0
"""When every schedule's fault begins: the gate on rtx4090 reaches its steady state (C at
~65 pages, KV ~93%) about 60 s after a burst's hand-over, so 120 s is well inside it."""
RESTART_S = 60.0
"""How long a crashed vLLM takes to serve again, supervisor included [estimate]: a new
process and CUDA context (~5 s), ~9.5 GB of olmOCR-2-7B-FP8 weights from the page cache
(~10 s), torch.compile from its cache (~15 s), the memory profile and CUDA-graph capture
(~20 s), plus the supervisor noticing (a few s of failed health checks)."""
METRICS_LATENCY_S = 2.0
"""Slow /metrics: every answer takes this long (half the gate's 4 s scrape timeout)."""
CHAT_PATH = "/v1/chat/completions"


async def _until(world: World, t: float) -> None:
    """Sleep on the world's clock until `t` (at once if it is past)."""
    await world.clock.sleep(max(0.0, t - world.clock.now()))


def _paused(at: float, seconds: float, part: str) -> Fault:
    """Pause one part of the node (`engines` or `front_end`) at `at` for `seconds`."""

    async def fault(world: World) -> None:
        await _until(world, at)
        engine = world.engine
        getattr(engine.node, f"pause_{part}")(world.clock.now())
        engine.nudge()
        await _until(world, at + seconds)
        getattr(engine.node, f"resume_{part}")(world.clock.now())
        engine.nudge()

    return fault


def calm_stall(at: float, seconds: float) -> Fault:
    """A GPU/engine-core stall that clears: nothing finishes for `seconds`, gauges frozen."""
    return _paused(at, seconds, "engines")


def stalled_front_end(at: float, seconds: float) -> Fault:
    """vLLM's API server loop blocked for `seconds`: bodies, images and /metrics wait."""
    return _paused(at, seconds, "front_end")


def crash_and_restart(at: float, down_seconds: float = RESTART_S) -> Fault:
    """vLLM dies (500s, then refused connections) and a supervisor restarts it, empty."""

    async def fault(world: World) -> None:
        await _until(world, at)
        world.kill(f"injected crash at {at:g} s")
        await _until(world, at + down_seconds)
        world.restart()

    return fault


def _interposed(at: float, seconds: float, build: Callable[[World], Interposer]) -> Fault:
    """The interposer `build` makes for the world stands between client and server from
    `at` for `seconds`."""

    async def fault(world: World) -> None:
        await _until(world, at)
        interposer = build(world)
        world.transport.interposers.append(interposer)
        try:
            await _until(world, at + seconds)
        finally:
            world.transport.interposers.remove(interposer)

    return fault


def _is_metrics(request: httpx.Request) -> bool:
    return request.url.path.startswith("/metrics")


def slow_metrics(at: float, seconds: float, latency: float = METRICS_LATENCY_S) -> Fault:
    """/metrics answers `latency` s late, the reading as old (a loaded host, a slow proxy)."""

    def build(world: World) -> Interposer:
        async def slow(request: httpx.Request, send: Send) -> httpx.Response:
            response = await send(request)
            if _is_metrics(request):
                await world.clock.sleep(latency)
            return response
        return slow

    return _interposed(at, seconds, build)


def failing_metrics(at: float, seconds: float = 60.0) -> Fault:
    """vLLM's metrics exporter failing: /metrics answers HTTP 500, chat still works."""

    async def failing(request: httpx.Request, send: Send) -> httpx.Response:
        if _is_metrics(request):
            return httpx.Response(500, text="Internal Server Error", request=request)
        return await send(request)

    return _interposed(at, seconds, lambda _: failing)


def queue_cap_503s(
    at: float, seconds: float, *, every_s: float = 10.0, burst_s: float = 3.0
) -> Fault:
    """Another client fills vLLM's --max-num-queued-reqs: chat gets 503s in bursts."""

    def build(world: World) -> Interposer:
        # The first `burst_s` of every `every_s` refuse every chat completion; the server
        # itself is untouched. The message names the profile's cap, or its slots if none.
        cap = world.profile.max_num_queued_reqs or world.profile.max_num_seqs
        body = {"object": "error", "message": queue_cap_message(cap),
                "type": "ServiceUnavailableError", "param": None, "code": 503}

        async def refuse(request: httpx.Request, send: Send) -> httpx.Response:
            in_burst = (world.clock.now() - at) % every_s < burst_s
            if request.url.path == CHAT_PATH and in_burst:
                return httpx.Response(503, json=body, request=request)
            return await send(request)
        return refuse

    return _interposed(at, seconds, build)


def seed_workers(group: int = 50, workers: int = 20) -> Workload:
    """The seed's scenario: `workers` olmOCR workers each hand all of their group's pages
    at once to the server (olmOCR's default group is 500 pages; 50 keeps a test short)."""
    return Workload(pages=workers * group, group_pages=group)


@dataclass(frozen=True)
class Schedule:
    """One named fault schedule: what happens, and when it begins and ends."""

    name: str
    faults: tuple[Fault, ...]
    begins_s: float | None
    """When the fault begins (None: a schedule without a fault)."""
    ends_s: float | None
    """When the fault is over: the server answers normally from then on."""
    workload: Workload | None = None
    """The pages, when the schedule is a workload rather than a fault (None: the caller's)."""


def _timed(name: str, fault: Fault, seconds: float) -> Schedule:
    return Schedule(name, (fault,), FAULT_AT, FAULT_AT + seconds)


SCHEDULES: dict[str, Schedule] = {s.name: s for s in (
    _timed("calm-stall-12s", calm_stall(FAULT_AT, 12.0), 12.0),
    # As long as PageClient's request timeout: the pages in flight time out during it.
    _timed("calm-stall-10min", calm_stall(FAULT_AT, 600.0), 600.0),
    _timed("crash-restart", crash_and_restart(FAULT_AT), RESTART_S),
    _timed("metrics-2s", slow_metrics(FAULT_AT, 60.0), 60.0),
    _timed("metrics-failing-1min", failing_metrics(FAULT_AT, 60.0), 60.0),
    _timed("queue-cap-503s", queue_cap_503s(FAULT_AT, 60.0), 60.0),
    _timed("front-end-stall", stalled_front_end(FAULT_AT, 30.0), 30.0),
    Schedule("seed-20-workers", (), None, None, seed_workers()),
)}
"""Every schedule by name (issue 30, item 5)."""
