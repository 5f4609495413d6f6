"""The benchmark's baseline strategies behave as olmOCR's code did (olmocr/pipeline.py, 69c33ab).

Fast tests drive the olmOCR semaphore with a FakeClock and a scripted stats line; the
slow test runs the whole benchmark once on the `ci` profile over real HTTP.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import io
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from bench.admission import ALL_STRATEGIES, RECORD_KEYS, main, seeds_table, utilization
from bench.harness import RunSpec, run_spec
from pagegate.admission.base import Outcome
from pagegate.clock import FakeClock, settle
from pagegate.sim.baselines import (
    LogLine,
    MonitorState,
    NoLimit,
    OlmocrGroupSemaphore,
    after_release,
    observe_line,
    should_release,
)
from pagegate.sim.synthetic import SyntheticRenderer, synthetic_groups, tag_png
from pagegate.sim.virtual import Run
from pagegate.sim.workload import png_size, prompt_tokens
from pagegate.sim.yardstick import ClosedLoop, Yardstick

SAFETY_SECONDS = 10.0
"""Wall-clock guard so a regression fails the test instead of hanging the suite."""


def in_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test body in a fresh event loop, with a safety timeout."""

    @functools.wraps(test)
    def wrapper() -> None:
        async def guarded() -> None:
            async with asyncio.timeout(SAFETY_SECONDS):
                await test()

        asyncio.run(guarded())

    return wrapper


# ------------------------------------------------------------------ the release rule (pure)


def _state(**kw: float | int | bool) -> MonitorState:
    base: dict[str, float | int | bool] = {
        "last_release_at": 0.0, "last_running": 80, "peak_running": 100,
        "last_queue": 10, "running_decreased": True,
    }
    base.update(kw)
    return MonitorState(**base)  # type: ignore[arg-type]


def test_release_needs_every_condition() -> None:
    ok = _state()
    assert should_release(ok, 31.0, locked=True)
    assert not should_release(ok, 31.0, locked=True, ready=False)
    assert not should_release(ok, 31.0, locked=False)                  # a token is still free
    assert not should_release(_state(last_queue=11), 31.0, locked=True)  # > 10 % of peak
    assert not should_release(_state(running_decreased=False), 31.0, locked=True)
    assert should_release(_state(running_decreased=False, last_running=0), 31.0, locked=True)


def test_cooldown_is_strictly_longer_than_30_seconds() -> None:
    assert not should_release(_state(), 30.0, locked=True)
    assert should_release(_state(), 30.001, locked=True)


def test_threshold_truncates_like_int() -> None:
    # int(19 * 0.1) == 1: two waiting requests hold the release; before any line (peak 0)
    # only an empty queue passes.
    assert not should_release(_state(peak_running=19, last_queue=2), 31.0, locked=True)
    assert should_release(_state(peak_running=19, last_queue=1), 31.0, locked=True)
    assert not should_release(_state(peak_running=0, last_queue=1, last_running=0), 31.0, locked=True)


def test_log_lines_track_peak_and_a_latched_decrease() -> None:
    s = MonitorState(last_release_at=0.0)
    s = observe_line(s, LogLine(running=50, waiting=400))
    s = observe_line(s, LogLine(running=80, waiting=300))
    assert (s.peak_running, s.running_decreased) == (80, False)
    s = observe_line(s, LogLine(running=70, waiting=5))
    s = observe_line(s, LogLine(running=75, waiting=5))   # going up again keeps the latch
    assert (s.peak_running, s.last_running, s.last_queue, s.running_decreased) == (80, 75, 5, True)
    s = after_release(s, 42.0)
    assert (s.running_decreased, s.last_release_at) == (False, 42.0)


# ------------------------------------------------------------------ the semaphore at run time


class _Stats:
    """A scripted vLLM stats line; counts how often it was read."""

    def __init__(self, running: int, waiting: int) -> None:
        self.line = LogLine(running, waiting)
        self.reads = 0

    async def __call__(self) -> LogLine:
        self.reads += 1
        return self.line


def _started(sem: OlmocrGroupSemaphore) -> list[str]:
    return [e.detail.split(": ")[1] for e in sem.events if e.kind == "group_start"]


async def _open(
    clock: FakeClock, stats: _Stats, groups: int = 5, **kw: bool
) -> OlmocrGroupSemaphore:
    sem = OlmocrGroupSemaphore([f"g{i}" for i in range(groups)], stats, clock, **kw)
    await sem.start()
    await settle()
    return sem


@in_loop
async def test_one_group_starts_at_once_and_the_next_waits_for_the_monitor() -> None:
    clock = FakeClock()
    stats = _Stats(running=80, waiting=300)
    sem = await _open(clock, stats)
    entered: list[str] = []

    async def page(group: str) -> None:
        async with sem.slot(group) as permit:
            entered.append(group)
            permit.finish(Outcome.OK)

    tasks = [asyncio.create_task(page(g)) for g in ("g0", "g1")]
    await settle()
    assert entered == ["g0"] and _started(sem) == ["g0"]
    await clock.advance(60.0)              # queue stays at 300: no release
    assert entered == ["g0"]
    stats.line = LogLine(running=70, waiting=5)   # drained, running fell
    await clock.advance(10.0)
    assert entered == ["g0", "g1"]
    assert [e.kind for e in sem.events] == ["group_start", "monitor_release", "group_start"]
    await asyncio.gather(*tasks)
    await sem.aclose()


@in_loop
async def test_the_monitor_acts_on_a_line_up_to_ten_seconds_old() -> None:
    clock = FakeClock()
    stats = _Stats(running=80, waiting=300)
    sem = await _open(clock, stats)
    await clock.advance(40.5)              # lines read at t = 0, 10, 20, 30, 40
    stats.line = LogLine(running=70, waiting=0)   # the server drains just after a line
    await clock.advance(9.0)               # t = 49.5: the monitor still sees 300 waiting
    assert _started(sem) == ["g0"]
    await clock.advance(1.0)               # t = 50.5: the line at t = 50 shows it
    assert _started(sem) == ["g0", "g1"]
    await sem.aclose()


@in_loop
async def test_finished_workers_hand_their_token_on_so_admission_ratchets_up() -> None:
    clock = FakeClock()
    stats = _Stats(running=70, waiting=0)
    sem = await _open(clock, stats, groups=6)
    stats.line = LogLine(running=60, waiting=0)
    await clock.advance(31.0)               # monitor release: g1 joins g0
    assert _started(sem) == ["g0", "g1"]
    sem.group_done("g0")                    # finally: release() -> g2 starts at once
    await settle()
    assert _started(sem) == ["g0", "g1", "g2"]
    stats.line = LogLine(running=50, waiting=0)
    await clock.advance(31.0)               # another monitor release: g3
    assert _started(sem) == ["g0", "g1", "g2", "g3"]
    # One group finished, three run at once: each monitor release added a worker for good.
    done = {"g0"}
    active = [g for g in _started(sem) if g not in done]
    assert active == ["g1", "g2", "g3"]
    assert sum(1 for e in sem.events if e.kind == "monitor_release") == 2
    sem.group_done("g1")                    # and the count never comes back down
    await settle()
    assert _started(sem)[-1] == "g4" and sem.semaphore_value == 0
    await sem.aclose()


@in_loop
async def test_without_the_finally_release_a_finished_group_frees_nothing() -> None:
    clock = FakeClock()
    stats = _Stats(running=70, waiting=0)
    sem = await _open(clock, stats, release_on_finish=False)
    sem.group_done("g0")
    await settle()
    assert _started(sem) == ["g0"]
    await sem.aclose()


async def _event_trace(serialize: bool) -> list[tuple[float, str]]:
    clock = FakeClock()
    stats = _Stats(running=80, waiting=300)
    sem = await _open(clock, stats, groups=8, serialize_release=serialize)
    script = [(35.0, 70, 4), (40.0, 90, 100), (50.0, 60, 0), (40.0, 40, 0), (35.0, 30, 0)]
    for step, (advance, running, waiting) in enumerate(script):
        stats.line = LogLine(running, waiting)
        await clock.advance(advance)
        if step == 2:
            sem.group_done("g0")
            await settle()
    await sem.aclose()
    return [(e.at, e.kind) for e in sem.events]


@in_loop
async def test_the_pr316_lock_changes_no_decision() -> None:
    plain, locked = await _event_trace(False), await _event_trace(True)
    assert plain == locked
    assert sum(1 for _, kind in plain if kind == "monitor_release") >= 2


@in_loop
async def test_no_limit_admits_every_page_at_once() -> None:
    admission = NoLimit()
    gate = asyncio.Event()

    async def page() -> None:
        async with admission.slot("g"):
            await gate.wait()

    tasks = [asyncio.create_task(page()) for _ in range(500)]
    await settle()
    assert admission.snapshot()["in_flight"] == 500
    gate.set()
    await asyncio.gather(*tasks)
    assert admission.snapshot()["outcomes"]["ok"] == 500


# ------------------------------------------------------------------ synthetic pages, scoring


@in_loop
async def test_synthetic_pages_have_a_real_size_and_their_own_digest() -> None:
    renderer = SyntheticRenderer()
    groups = synthetic_groups(pages=10, group_pages=4)
    assert [g.document.page_count for g in groups] == [4, 4, 2]
    pngs = [
        (await renderer.render(g.document.source, i, rotation=0)).png
        for g in groups
        for i in range(g.document.page_count)
    ]
    assert len({hashlib.sha1(p).digest() for p in pngs}) == 10
    assert all(png_size(p) == (996, 1288) for p in pngs)
    assert Image.open(io.BytesIO(pngs[0])).size == (996, 1288)  # chunk CRCs are valid
    assert prompt_tokens(996, 1288, 557) > 1_700
    with pytest.raises(ValueError):
        tag_png(b"not a png", "x")


def _run(end: str, pages_done: int, elapsed_s: float, pages: int = 100) -> Run:
    return Run(engine="e", strategy="s", pages=pages, seed=0, pages_done=pages_done,
               elapsed_s=elapsed_s, end=end, crash_reason=None, preemptions=0, peak_waiting=0,
               peak_kv_usage=0.0, peak_in_flight=0, capacity_retries=0, done_at=(), trace=())


def test_crashed_runs_are_scored_on_the_whole_workload() -> None:
    stick = Yardstick(ClosedLoop(8, 100.0, 100, False, 0, 0), ())  # 1 page/s
    assert utilization(_run("finished", 100, 111.1), stick, 300.0) == pytest.approx(0.9, rel=1e-3)
    # 500 of 2000 pages at full speed before dying at t = 400: a quarter of the job.
    stick = Yardstick(ClosedLoop(8, 2000.0, 2000, False, 0, 0), ())
    assert utilization(_run("crashed", 500, 400.0, 2000), stick, 6000.0) == pytest.approx(0.25)
    assert utilization(_run("timed_out", 600, 3000.0, 2000), stick, 6000.0) == pytest.approx(0.2)


# ------------------------------------------------------------------ the whole benchmark


@pytest.mark.slow
def test_ci_benchmark_writes_every_key_and_the_deep_queue_crashes_where_the_gate_does_not(
    tmp_path: Path,
) -> None:
    out = tmp_path / "ci.json"
    main(["--profiles", "ci", "--seed", "1", "--json", str(out), "--plot", str(tmp_path)])
    records = json.loads(out.read_text())["records"]
    assert sorted(r["strategy"] for r in records) == sorted(ALL_STRATEGIES)
    for r in records:
        missing = [k for k in RECORD_KEYS if k not in r]
        assert not missing, f"{r['strategy']} lacks {missing}"
    by_name = {r["strategy"]: r for r in records}
    assert by_name["deep-queue"]["crashes"] == 1
    assert by_name["pagegate"]["crashes"] == 0 and by_name["pagegate"]["pages_done"] == 800
    assert (tmp_path / "ci.png").stat().st_size > 10_000


@pytest.mark.slow
def test_the_wall_clock_harness_crosses_the_process_boundary() -> None:
    """One end-to-end smoke run: the gate in this process, the simulator in its own."""
    spec = RunSpec(strategy="pagegate", profile="ci", pages=80, seed=0, time_scale=1.0,
                   group_pages=40, sample_interval_s=0.5, budget_s=120.0)
    result = run_spec(spec)
    assert result["crashed"] == 0 and result["pages_done"] == 80
    assert result["peak_waiting"] <= 64


def test_the_seeds_table_gives_each_seed_its_own_row() -> None:
    def record(u: float, crashes: int = 0, preemptions: int = 0) -> dict[str, Any]:
        return {"utilization": u, "crashes": crashes, "preemptions": preemptions, "pages": 400}

    table = seeds_table({
        1: [record(0.99), record(0.96), record(1.0, preemptions=5)],
        7: [record(0.90, crashes=1), record(0.98)],
    }).splitlines()
    assert table[2] == "| 1 | 3 | 66.7% | 0.990 | 0.960 | 0 | 1 |"
    assert table[3] == "| 7 | 2 | 50.0% | 0.940 | 0.900 | 1 | 0 |"
