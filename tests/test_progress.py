"""Progress sampling, rates, the bounded timeline, the monitor loop, displays and the chart."""

from __future__ import annotations

import asyncio
import io
import itertools
import logging
import struct
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from rich.console import Console
from rich.theme import Theme

from pagegate.clock import FakeClock
from pagegate.ocr.stats import RunStats
from pagegate.report.chart import release_times, render_run_chart
from pagegate.report.display import TerminalProgress, render_update
from pagegate.report.progress import (
    PlanProgress,
    ProgressSample,
    ProgressUpdate,
    Throttle,
    Timeline,
    format_duration,
    monitor,
    percent_settled,
    progress_line,
    progress_update,
    publish,
    take_sample,
)

GATE = {
    "kind": "gate",
    "in_flight": 32,
    "queued": 200,
    "releases": 7,
    "pauses": 1,
    "last_decision": "cooldown",
    "paused": None,
    "last_reading": {"waiting": 5, "running": 27, "kv_usage": 0.61, "at": 9.0},
}


def sample(elapsed: float, pages_done: int, **kw: Any) -> ProgressSample:
    base = ProgressSample(
        elapsed=elapsed, pages_planned=1000, pages_settled=pages_done, pages_done=pages_done,
        fallback_pages=0, pdfs_planned=10, pdfs_done=0, pdfs_failed=0, groups_planned=4,
        groups_done=0, input_tokens=10 * pages_done, output_tokens=5 * pages_done, in_flight=3,
    )
    return replace(base, **kw)


# ------------------------------------------------------------------ sampling


def test_sample_reads_counters_plan_and_gate_snapshot() -> None:
    stats = RunStats(started_at=100.0, pages_done=40, fallback_pages=2, input_tokens=900,
                     output_tokens=300, pdfs_done=3, pdfs_failed=1)
    plan = PlanProgress(groups_planned=4, pdfs_planned=10, pages_planned=200)

    s = take_sample(stats, plan, GATE, now=112.5)

    assert s.elapsed == 12.5
    assert (s.pages_planned, s.pages_settled, s.pages_done) == (200, 40, 40)
    assert (s.pdfs_planned, s.pdfs_done, s.pdfs_failed) == (10, 3, 1)
    assert (s.in_flight, s.gate_queued, s.server_waiting, s.server_running) == (32, 200, 5, 27)
    assert s.kv_usage == 0.61
    assert (s.releases, s.pauses, s.last_decision, s.paused) == (7, 1, "cooldown", None)


def test_finished_groups_settle_all_their_planned_pages() -> None:
    """A group of 100 pages returns with 30 OCR'd (the rest skipped or failed): all 100
    count; pages OCR'd in groups still running count as they finish."""
    stats = RunStats(started_at=0.0, pages_done=50)
    plan = PlanProgress(groups_planned=3, pdfs_planned=9, pages_planned=300)
    plan.group_finished(planned_pages=100, ocr_pages=30)

    s = take_sample(stats, plan, {}, now=1.0)

    assert s.pages_settled == 100 + (50 - 30)
    assert s.groups_done == 1
    assert s.server_waiting is None and s.releases is None  # fixed-limit snapshot: no gate fields


def test_settled_never_passes_the_plan_and_is_complete_when_all_groups_are_back() -> None:
    stats = RunStats(started_at=0.0, pages_done=500)
    plan = PlanProgress(groups_planned=2, pdfs_planned=2, pages_planned=300)
    assert take_sample(stats, plan, {}, now=1.0).pages_settled == 300
    stats = RunStats(started_at=0.0, pages_done=0)
    plan.group_finished(200, 0)
    plan.group_finished(100, 0)
    s = take_sample(stats, plan, {}, now=1.0)
    assert s.pages_settled == 300 and percent_settled(s) == 100.0


def test_empty_plan_is_done_not_divided_by_zero() -> None:
    plan = PlanProgress(groups_planned=0, pdfs_planned=0, pages_planned=0)
    s = take_sample(RunStats(started_at=0.0), plan, {}, now=0.0)
    assert percent_settled(s) == 100.0
    assert progress_update(s, []).eta_seconds == 0.0


# ------------------------------------------------------------------ rates and ETA


def test_rates_come_from_the_window_not_the_whole_run() -> None:
    history = [sample(t, 0) for t in range(0, 100, 10)] + [sample(100, 100)]
    now = sample(160, 700)  # 600 pages in the last 60 s; 700 over 160 s overall

    update = progress_update(now, history, window_seconds=60)

    assert update.pages_per_second == pytest.approx(600 / 60)
    assert update.tokens_per_second == pytest.approx(15 * 600 / 60)
    assert update.eta_seconds == pytest.approx(300 / 10)


def test_without_history_rates_are_over_the_whole_run() -> None:
    update = progress_update(sample(20, 100), [])
    assert update.pages_per_second == 5.0
    assert update.eta_seconds == pytest.approx(900 / 5)


def test_eta_is_unknown_until_a_page_is_done_and_zero_at_the_end() -> None:
    assert progress_update(sample(30, 0), [sample(0, 0)]).eta_seconds is None
    assert progress_update(sample(30, 0), [], final=True).eta_seconds == 0.0


def test_format_duration() -> None:
    assert format_duration(None) == "?"
    assert format_duration(65.4) == "1:05"
    assert format_duration(3723) == "1:02:03"
    assert format_duration(-3) == "0:00"


def test_progress_line_names_every_figure() -> None:
    s = take_sample(RunStats(started_at=0.0, pages_done=120, pdfs_done=10, pdfs_failed=1),
                    PlanProgress(4, 40, 300), GATE, now=30.0)
    line = progress_line(progress_update(s, []))
    for part in ("120/300 pages converted (40%)", "4.0 pages/s", "ETA 0:45", "in flight 32",
                 "server waiting 5", "PDFs 10 ok / 1 failed of 40", "gate: cooldown",
                 "7 releases", "1 pauses"):
        assert part in line


def test_progress_line_says_what_other_runs_over_the_workspace_did() -> None:
    s = take_sample(RunStats(started_at=0.0, pages_done=120, pdfs_done=10, pdfs_by_others=25),
                    PlanProgress(4, 40, 300), GATE, now=30.0)
    assert "PDFs 35 (this run 10, others 25) ok / 0 failed of 40" in progress_line(
        progress_update(s, []))


def test_no_eta_while_paused() -> None:
    s = take_sample(RunStats(started_at=0.0, pages_done=120), PlanProgress(4, 40, 300),
                    {**GATE, "paused": "no_reading"}, now=30.0)
    line = progress_line(progress_update(s, []))
    assert "ETA ?" in line and "PAUSED (no_reading)" in line


def test_progress_counts_only_converted_pages() -> None:
    """Every group back, every PDF failed: the plan is settled, but nothing was converted."""
    plan = PlanProgress(1, 2, 5)
    plan.group_finished(planned_pages=5, ocr_pages=0)
    s = take_sample(RunStats(started_at=0.0, pdfs_failed=2), plan, GATE, now=3.0)
    assert s.pages_settled == 5
    assert "0/5 pages converted (0%)" in progress_line(progress_update(s, []))


# ------------------------------------------------------------------ timeline, throttle


def test_timeline_stays_bounded_and_keeps_both_ends() -> None:
    timeline = Timeline(max_samples=100)
    for t in range(10_000):
        timeline.add(sample(float(t), t))
    times = [s.elapsed for s in timeline.samples]
    assert len(times) <= 100
    assert times[0] == 0.0 and times[-1] >= 9_900.0
    assert times == sorted(times)
    assert timeline.spacing >= 64  # doubled on every overflow
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) <= 4 * min(gaps)  # still roughly evenly spread


def test_timeline_spacing_drops_samples_unless_forced() -> None:
    timeline = Timeline(max_samples=10, spacing=5.0)
    timeline.add(sample(0, 0))
    timeline.add(sample(1, 1))
    timeline.add(sample(2, 2), force=True)
    assert [s.elapsed for s in timeline.samples] == [0, 2]


def test_throttle() -> None:
    throttle = Throttle(5.0)
    assert [throttle.due(t) for t in (0, 1, 4.9, 5.0, 6, 10.5)] == [True, False, False, True, False, True]


# ------------------------------------------------------------------ the loop


def test_monitor_samples_every_interval_and_survives_a_failing_sink() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        seen: list[ProgressUpdate] = []
        done = [0]

        async def broken(update: ProgressUpdate) -> None:
            raise RuntimeError("API down")

        async def record(update: ProgressUpdate) -> None:
            seen.append(update)

        def take() -> ProgressSample:
            done[0] += 10
            return sample(clock.now(), done[0])

        timeline = Timeline()
        task = asyncio.create_task(monitor(take, [broken, record], timeline, clock, interval=2.0))
        await clock.advance(0)
        await clock.advance(2.0)
        await clock.advance(2.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert [u.sample.elapsed for u in seen] == [0.0, 2.0, 4.0]
        assert seen[-1].pages_per_second == pytest.approx(20 / 4)
        assert len(timeline.samples) == 3
        final = await publish(sample(5.0, 40), [record], timeline, final=True)
        assert final.final and seen[-1] is final and final.eta_seconds == 0.0

    asyncio.run(scenario())


# ------------------------------------------------------------------ terminal display


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def gate_update() -> ProgressUpdate:
    s = take_sample(RunStats(started_at=0.0, pages_done=120, pdfs_done=10, pdfs_failed=1),
                    PlanProgress(4, 40, 300), {**GATE, "paused": "stale"}, now=30.0)
    return progress_update(s, [])


def test_render_update_shows_the_operator_figures() -> None:
    out = io.StringIO()
    Console(file=out, width=140, force_terminal=False).print(render_update(gate_update()))
    text = out.getvalue()
    for part in ("120/300 pages", "40%", "4.0 pages/s", "in flight 32",
                 "server waiting 5", "gate: cooldown", "7 releases", "PAUSED (stale)"):
        assert part in text


def test_non_tty_gets_plain_throttled_lines_and_a_final_one() -> None:
    out = io.StringIO()
    now = [0.0]
    update = gate_update()
    with TerminalProgress(out, plain_interval=30.0, clock=lambda: now[0]) as display:
        assert not display.live_mode
        for t in (0.0, 10.0, 29.0, 31.0):
            now[0] = t
            display.show(update)
        display.show(replace(update, final=True))
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # t=0, t=31, final
    assert all(line.startswith("progress: 120/300 pages") for line in lines)
    assert "\x1b" not in out.getvalue()  # no escape codes in a pipe or a log file


def test_tty_shows_a_live_panel_and_routes_log_lines_above_it() -> None:
    tty = FakeTty()
    handler = logging.StreamHandler(tty)
    logger = logging.getLogger("pagegate.test.display")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with TerminalProgress(tty) as display:
            assert display.live_mode
            assert handler.stream is not tty  # sent through Live's proxy while the panel is up
            display.show(gate_update())
            logger.warning("a log line while the panel is up")
        assert handler.stream is tty
    finally:
        logger.removeHandler(handler)
    text = tty.getvalue()
    assert "a log line while the panel is up" in text
    assert "120/300 pages" in text and "\x1b[" in text


# ------------------------------------------------------------------ chart


def test_release_times_place_each_release_at_the_sample_that_saw_it() -> None:
    samples = [sample(0, 0, releases=0), sample(1, 0, releases=1), sample(2, 0, releases=1),
               sample(3, 0, releases=3), sample(4, 0, releases=None)]
    assert release_times(samples) == [1, 3, 3]


def test_chart_is_a_png_of_the_expected_size() -> None:
    samples = [sample(float(t), t * 3, releases=t // 5, server_waiting=t % 7, gate_queued=50 - t)
               for t in range(50)]
    png = render_run_chart(samples, title="test run")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (1000, 650)


def test_chart_of_a_fixed_limit_run_has_no_gate_series() -> None:
    png = render_run_chart([sample(0, 0), sample(1, 5)])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


class GrowingTimeline(list[ProgressSample]):
    """A timeline the sampler appends to while the chart reads it: one more sample each
    time it is iterated, as when the chart is drawn in a thread beside the live sampler."""

    def __iter__(self) -> Iterator[ProgressSample]:
        items = list(super().__iter__())
        self.append(sample(float(len(items)), len(items)))
        return iter(items)


def test_chart_draws_from_one_snapshot_of_a_timeline_that_grows_meanwhile() -> None:
    timeline = GrowingTimeline([sample(0, 0), sample(1, 5)])
    png = render_run_chart(timeline)  # drew every series from the same samples: no
    assert png[:8] == b"\x89PNG\r\n\x1a\n"  # "x and y must have same first dimension"
    assert len(timeline) == 3  # it was read once


class RichConsoleHandler(logging.Handler):
    """Like Prefect's console handler: prints through its own Console, whose theme has
    none of rich's named styles."""

    def __init__(self, stream: io.StringIO) -> None:
        super().__init__()
        self.console = Console(file=stream, theme=Theme({}, inherit=False), force_terminal=True)

    def emit(self, record: logging.LogRecord) -> None:
        self.console.print(self.format(record), soft_wrap=True)


def test_tty_panel_is_drawn_below_lines_of_a_rich_console_handler(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tty = FakeTty()
    handler = RichConsoleHandler(tty)
    logger = logging.getLogger("pagegate.test.rich-display")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with TerminalProgress(tty) as display:
            display.show(gate_update())
            logger.warning("line from a rich handler")
            after_log = tty.getvalue()
        logger.warning("after the panel")
    finally:
        logger.removeHandler(handler)
    # the log line is followed by the panel again (Live re-drew itself below it)
    tail = after_log.split("line from a rich handler", 1)[1]
    assert "120/300 pages" in tail
    assert "after the panel" in tty.getvalue().split("gate: ")[-1]  # hook removed: plain line
    assert "Logging error" not in capsys.readouterr().err
