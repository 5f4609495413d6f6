"""Baseline admission strategies to measure the gate against (not used by a run).

Each one implements `pagegate.admission.Admission`, so the same production `PageOcr`
drives pages through it. Two of them reproduce olmOCR's old work-group semaphore as
closely as allenai/olmocr `olmocr/pipeline.py` at 69c33ab (2025-08-15) and its later
commits allow:

    semaphore = asyncio.Semaphore(1)              # shared by workers and the monitor
    worker:  await semaphore.acquire(); item = next work item;
             fire ALL pages of the item at once; wait for them;
             finally: semaphore.release()         # present until Nov 2025 (f53e221)
    monitor (timeout_task), every 1 s:
        should_release = (server_printed_ready_message
            and last_queue_req <= int(peak_running_req * 0.1)
            and time.time() - last_semaphore_release > 30
            and semaphore.locked()
            and (last_running_req == 0 or running_reqs_decreased))

`last_running_req`, `peak_running_req`, `last_queue_req` and `running_reqs_decreased`
came from regexes over vLLM's stats log line ("Running: N reqs, Waiting: M reqs"),
printed every 10 s: here a /metrics scrape every 10 s stands in for that line, so the
monitor acts on readings up to 10 s old, as olmOCR did. `running_reqs_decreased` is set
when a line shows fewer running requests than the previous one and cleared by each
monitor release; `last_semaphore_release` starts when the server is ready.

PR #316 (head 0742014, never merged) wrapped the monitor's check-and-release in an
`asyncio.Lock` and re-checked `semaphore.locked()` inside it. `serialize_release=True`
does exactly that. The monitor is a single coroutine that never awaits between check and
release, so the lock cannot change a decision: the benchmark shows the two side by side.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

from pagegate.admission.base import AdmissionSignals, Outcome, Permit, RecordingPermit, settled
from pagegate.clock import Clock

log = logging.getLogger("bench.strategies")

OLMOCR_WORKERS = 20          # olmOCR --workers default (allenai/olmocr olmocr/pipeline.py)
OLMOCR_PEAK_RATIO = 0.1      # 69c33ab; raised to 0.2 in b5b1de9 (2025-09-29)
OLMOCR_COOLDOWN_S = 30.0     # "time.time() - last_semaphore_release > 30"
OLMOCR_MONITOR_S = 1.0       # timeout_task: await asyncio.sleep(1)
VLLM_LOG_INTERVAL_S = 10.0   # vLLM's periodic stats line (log in allenai/olmocr issue #370)


class _Counts:
    """In-flight and outcome counts shared by the baselines' snapshots."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak_in_flight = 0
        self.outcomes = {o.value: 0 for o in Outcome}

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[Permit]:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        with settled(RecordingPermit(), self._settle) as permit:
            yield permit

    def _settle(self, outcome: Outcome) -> None:
        self.in_flight -= 1
        self.outcomes[outcome.value] += 1


class NoLimit:
    """Every page goes to the server the moment it asks: no admission at all."""

    def __init__(self) -> None:
        self._counts = _Counts()

    def slot(self, group_id: str) -> AbstractAsyncContextManager[Permit]:
        return self._counts.hold()

    def signals(self, now: float) -> AdmissionSignals:
        return AdmissionSignals(in_flight=self._counts.in_flight, queued=0, limit=None)

    def snapshot(self) -> dict[str, Any]:
        c = self._counts
        return {"kind": "none", "in_flight": c.in_flight, "peak_in_flight": c.peak_in_flight,
                "outcomes": dict(c.outcomes)}


# --------------------------------------------------------------- olmOCR's monitor, pure


@dataclass(frozen=True)
class LogLine:
    """What olmOCR's regexes took from one vLLM stats line."""

    running: int
    waiting: int


@dataclass(frozen=True)
class MonitorState:
    """olmOCR's monitor variables (vllm_server_task's nonlocals)."""

    last_release_at: float          # last_semaphore_release (reset when the server is ready)
    last_running: int = 0           # last_running_req
    peak_running: int = 0           # peak_running_req
    last_queue: int = 0             # last_queue_req
    running_decreased: bool = False  # running_reqs_decreased


def observe_line(state: MonitorState, line: LogLine) -> MonitorState:
    """process_line: fold one stats line into the monitor's variables."""
    decreased = state.running_decreased or line.running < state.last_running
    return replace(
        state,
        last_running=line.running,
        peak_running=max(state.peak_running, line.running),
        last_queue=line.waiting,
        running_decreased=decreased,
    )


def should_release(
    state: MonitorState,
    now: float,
    *,
    locked: bool,
    ready: bool = True,
    peak_ratio: float = OLMOCR_PEAK_RATIO,
    cooldown_seconds: float = OLMOCR_COOLDOWN_S,
) -> bool:
    """timeout_task's condition, term for term (note the int() and the strict '>')."""
    return (
        ready
        and state.last_queue <= int(state.peak_running * peak_ratio)
        and now - state.last_release_at > cooldown_seconds
        and locked
        and (state.last_running == 0 or state.running_decreased)
    )


def after_release(state: MonitorState, now: float) -> MonitorState:
    return replace(state, running_decreased=False, last_release_at=now)


# --------------------------------------------------------------- olmOCR's semaphore, runtime


@dataclass(frozen=True)
class SemaphoreEvent:
    """One semaphore event, for traces: who released, or which group a worker started."""

    at: float
    kind: str            # "monitor_release", "worker_release", "group_start"
    detail: str


class OlmocrGroupSemaphore:
    """olmOCR's 2024-2025 admission: workers take a shared Semaphore(1) per work group.

    `groups` is the work queue in order. A page's `slot(group_id)` waits until a worker
    has started its group, then goes straight to the server (no per-request limit
    existed then). The harness calls `group_done(group_id)` when every page of the group
    has come back (olmOCR's TaskGroup ending), which ends that worker's item.
    `stats` returns the current running/waiting counts; it is read every
    `log_interval_seconds`, like the stats line olmOCR parsed.
    """

    def __init__(
        self,
        groups: Sequence[str],
        stats: Callable[[], Awaitable[LogLine]],
        clock: Clock,
        *,
        workers: int = OLMOCR_WORKERS,
        serialize_release: bool = False,
        release_on_finish: bool = True,
        peak_ratio: float = OLMOCR_PEAK_RATIO,
        cooldown_seconds: float = OLMOCR_COOLDOWN_S,
        monitor_interval_seconds: float = OLMOCR_MONITOR_S,
        log_interval_seconds: float = VLLM_LOG_INTERVAL_S,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self._queue: deque[str] = deque(groups)
        self._started: dict[str, asyncio.Event] = {g: asyncio.Event() for g in groups}
        self._done: dict[str, asyncio.Event] = {g: asyncio.Event() for g in groups}
        self._stats = stats
        self._clock = clock
        self.workers = workers
        self.serialize_release = serialize_release
        self.release_on_finish = release_on_finish
        self.peak_ratio = peak_ratio
        self.cooldown_seconds = cooldown_seconds
        self.monitor_interval_seconds = monitor_interval_seconds
        self.log_interval_seconds = log_interval_seconds
        self._semaphore = asyncio.Semaphore(1)
        self._release_lock = asyncio.Lock() if serialize_release else None
        self.monitor = MonitorState(last_release_at=clock.now())
        self.events: list[SemaphoreEvent] = []
        self.scrape_failures = 0
        self._counts = _Counts()
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle

    async def start(self) -> None:
        """The server is ready now: the cooldown clock starts (server_printed_ready_message)."""
        if self._tasks:
            return
        self.monitor = replace(self.monitor, last_release_at=self._clock.now())
        self._tasks = [
            asyncio.create_task(self._read_log(), name="olmocr-log"),
            asyncio.create_task(self._monitor_loop(), name="olmocr-monitor"),
            *(asyncio.create_task(self._worker(i), name=f"olmocr-worker-{i}")
              for i in range(self.workers)),
        ]

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    # -- Admission

    def slot(self, group_id: str) -> AbstractAsyncContextManager[Permit]:
        return self._slot(group_id)

    @asynccontextmanager
    async def _slot(self, group_id: str) -> AsyncIterator[Permit]:
        await self._started[group_id].wait()
        async with self._counts.hold() as permit:
            yield permit

    def group_done(self, group_id: str) -> None:
        self._done[group_id].set()

    def signals(self, now: float) -> AdmissionSignals:
        return AdmissionSignals(in_flight=self._counts.in_flight, queued=0, limit=None)

    def snapshot(self) -> dict[str, Any]:
        c = self._counts
        kinds = [e.kind for e in self.events]
        return {
            "kind": "olmocr-lock" if self.serialize_release else "olmocr-2024",
            "in_flight": c.in_flight,
            "peak_in_flight": c.peak_in_flight,
            "outcomes": dict(c.outcomes),
            "groups_started": kinds.count("group_start"),
            "monitor_releases": kinds.count("monitor_release"),
            "worker_releases": kinds.count("worker_release"),
            "peak_running_seen": self.monitor.peak_running,
            "scrape_failures": self.scrape_failures,
        }

    @property
    def semaphore_value(self) -> int:
        """Worker tokens available now (the ratchet shows up here)."""
        return self._semaphore._value

    # -- tasks

    async def _read_log(self) -> None:
        while True:
            try:
                line = await self._stats()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a dead server prints no stats line
                self.scrape_failures += 1
                log.debug("no stats line: %r", exc)
            else:
                self.monitor = observe_line(self.monitor, line)
            await self._clock.sleep(self.log_interval_seconds)

    async def _monitor_loop(self) -> None:
        while True:
            await self._clock.sleep(self.monitor_interval_seconds)
            if self._release_lock is None:
                self._check_and_release()
            else:
                async with self._release_lock:  # PR #316
                    self._check_and_release()

    def _check_and_release(self) -> None:
        now = self._clock.now()
        if should_release(
            self.monitor,
            now,
            locked=self._semaphore.locked(),
            peak_ratio=self.peak_ratio,
            cooldown_seconds=self.cooldown_seconds,
        ):
            self._semaphore.release()
            self.monitor = after_release(self.monitor, now)
            m = self.monitor
            self.events.append(SemaphoreEvent(
                now, "monitor_release",
                f"running={m.last_running} waiting={m.last_queue} peak={m.peak_running}"))

    async def _worker(self, worker_id: int) -> None:
        while True:
            await self._semaphore.acquire()
            if not self._queue:
                self._semaphore.release()  # "exiting due to empty queue"
                return
            group_id = self._queue.popleft()
            self.events.append(SemaphoreEvent(self._clock.now(), "group_start",
                                              f"worker {worker_id}: {group_id}"))
            try:
                self._started[group_id].set()
                await self._done[group_id].wait()
            finally:
                if self.release_on_finish:
                    self._semaphore.release()
                    self.events.append(SemaphoreEvent(self._clock.now(), "worker_release",
                                                      f"worker {worker_id}: {group_id} done"))
