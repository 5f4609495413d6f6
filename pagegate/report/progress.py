"""Live progress of one run: samples of the counters, rates, ETA, and the loop that reports them.

The core is pure: `take_sample` turns the run's counters (RunStats), the plan's
accounting (PlanProgress) and the admission snapshot into a frozen `ProgressSample`;
`progress_update` adds rates and an ETA from a window of earlier samples; `Timeline`
keeps a bounded history for the run chart. The only I/O is `monitor`, a coroutine the
flow runs beside its groups that samples on an injected Clock and hands each update to
async sinks (the Prefect progress artifact, the terminal display). A sink that raises is
logged and skipped: progress must never fail a run.

"Settled" pages are what the progress bar counts: pages OCR'd in this run plus, once a
group task has returned, all of its planned pages (PDFs skipped as already done, failed
PDFs, results a retry took from the cache). So the bar reaches 100 % when every group is
back, whatever happened to its PDFs, and a rerun over a mostly-done input moves fast.
Within an unfinished group only OCR'd pages count.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from pagegate.clock import Clock
from pagegate.ocr.stats import RunStats

log = logging.getLogger("pagegate.progress")

RATE_WINDOW_SECONDS = 60.0  # pages/s and ETA come from the last minute, not the whole run


@dataclass
class PlanProgress:
    """What the plan promised, and how much of it finished groups have settled.

    Mutable, one per run, updated by the flow when a group task returns.
    """

    groups_planned: int
    pdfs_planned: int
    pages_planned: int
    groups_done: int = 0
    pages_in_done_groups: int = 0      # planned pages of groups that have returned
    ocr_pages_in_done_groups: int = 0  # of those, pages OCR'd in this run (counted in RunStats)

    def group_finished(self, planned_pages: int, ocr_pages: int) -> None:
        self.groups_done += 1
        self.pages_in_done_groups += planned_pages
        self.ocr_pages_in_done_groups += ocr_pages


@dataclass(frozen=True)
class ProgressSample:
    """The run's counters at one moment; `elapsed` is seconds since the run started."""

    elapsed: float
    pages_planned: int
    pages_settled: int
    pages_done: int
    fallback_pages: int
    pdfs_planned: int
    pdfs_done: int
    pdfs_failed: int
    groups_planned: int
    groups_done: int
    input_tokens: int
    output_tokens: int
    in_flight: int
    gate_queued: int | None = None       # pages waiting at the gate for admission
    server_waiting: int | None = None    # the server's own queue (vllm:num_requests_waiting)
    server_running: int | None = None
    kv_usage: float | None = None
    releases: int | None = None          # gate units released so far
    pauses: int | None = None            # times page dispatch was paused (stale metrics, ...)
    last_decision: str | None = None     # the gate's last release decision (reason)
    paused: str | None = None            # why dispatch is paused now, if it is
    pdfs_by_others: int = 0              # PDFs other runs over the workspace committed


@dataclass(frozen=True)
class ProgressUpdate:
    """A sample plus what is derived from recent history: rates and the time left."""

    sample: ProgressSample
    pages_per_second: float
    tokens_per_second: float      # input + output tokens
    eta_seconds: float | None     # None while nothing has been measured yet
    final: bool = False

    @property
    def percent(self) -> float:
        return percent_settled(self.sample)


ProgressSink = Callable[[ProgressUpdate], Awaitable[None]]

PROGRESS_LISTENER: ContextVar[ProgressSink | None] = ContextVar(
    "pagegate_progress_listener", default=None
)
"""An extra sink for the run's progress, set by whoever starts the flow in-process (the
CLI's terminal display). Context variables cross into the flow's event loop with
asyncio.run, and no listener is set on a worker, so deployments report to Prefect only."""


# --------------------------------------------------------------------------- pure core


def take_sample(
    stats: RunStats, plan: PlanProgress, gate: Mapping[str, Any], now: float
) -> ProgressSample:
    """Combine the counters, the plan and an admission snapshot into one sample."""
    live_pages = max(0, stats.pages_done - plan.ocr_pages_in_done_groups)
    settled = min(plan.pages_planned, plan.pages_in_done_groups + live_pages)
    if plan.groups_done >= plan.groups_planned:
        settled = plan.pages_planned
    reading = gate.get("last_reading") if isinstance(gate.get("last_reading"), Mapping) else None
    return ProgressSample(
        elapsed=max(0.0, now - stats.started_at),
        pages_planned=plan.pages_planned,
        pages_settled=settled,
        pages_done=stats.pages_done,
        fallback_pages=stats.fallback_pages,
        pdfs_planned=plan.pdfs_planned,
        pdfs_done=stats.pdfs_done,
        pdfs_failed=stats.pdfs_failed,
        pdfs_by_others=stats.pdfs_by_others,
        groups_planned=plan.groups_planned,
        groups_done=plan.groups_done,
        input_tokens=stats.input_tokens,
        output_tokens=stats.output_tokens,
        in_flight=_int(gate.get("in_flight")) or 0,
        gate_queued=_int(gate.get("queued")),
        server_waiting=_int(reading.get("waiting")) if reading else None,
        server_running=_int(reading.get("running")) if reading else None,
        kv_usage=_float(reading.get("kv_usage")) if reading else None,
        releases=_int(gate.get("releases")),
        pauses=_int(gate.get("pauses")),
        last_decision=_str(gate.get("last_decision")),
        paused=_str(gate.get("paused")),
    )


def percent_settled(sample: ProgressSample) -> float:
    if sample.pages_planned <= 0:
        return 100.0 if sample.groups_done >= sample.groups_planned else 0.0
    return min(100.0, 100.0 * sample.pages_settled / sample.pages_planned)


def percent_converted(sample: ProgressSample) -> float:
    """Pages OCR'd in this run as a share of the plan: what the line shows, so a run whose
    PDFs all failed never reads as 100 % done."""
    if sample.pages_planned <= 0:
        return 0.0
    return min(100.0, 100.0 * sample.pages_done / sample.pages_planned)


def progress_update(
    sample: ProgressSample,
    history: Sequence[ProgressSample],
    *,
    window_seconds: float = RATE_WINDOW_SECONDS,
    final: bool = False,
) -> ProgressUpdate:
    """Rates over the last `window_seconds` of `history` (oldest first), and the ETA.

    The window's base is the oldest sample no more than `window_seconds` old; with no
    such sample (or none at all) the rates are over the whole run, from zero.
    """
    base = _window_base(sample, history, window_seconds)
    if base is None:
        span, pages, tokens = sample.elapsed, sample.pages_done, _tokens(sample)
    else:
        span = sample.elapsed - base.elapsed
        pages = sample.pages_done - base.pages_done
        tokens = _tokens(sample) - _tokens(base)
    pages_per_second = pages / span if span > 0 else 0.0
    tokens_per_second = tokens / span if span > 0 else 0.0
    remaining = max(0, sample.pages_planned - sample.pages_settled)
    if final or remaining == 0:
        eta: float | None = 0.0
    elif sample.paused:  # nothing moves while dispatch is held: no time can be promised
        eta = None
    elif pages_per_second > 0:
        eta = remaining / pages_per_second
    else:
        eta = None
    return ProgressUpdate(sample, pages_per_second, tokens_per_second, eta, final=final)


def _window_base(
    sample: ProgressSample, history: Sequence[ProgressSample], window_seconds: float
) -> ProgressSample | None:
    for old in history:  # oldest first: the first one inside the window is the base
        if sample.elapsed - old.elapsed <= window_seconds and old.elapsed < sample.elapsed:
            return old
    return None


def format_duration(seconds: float | None) -> str:
    """'1:02:03', '4:05'; '?' when unknown."""
    if seconds is None:
        return "?"
    total = round(max(0.0, seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def pdfs_ok(s: ProgressSample) -> str:
    """The PDFs done so far, and, with other runs over the workspace, whose they are."""
    if not s.pdfs_by_others:
        return str(s.pdfs_done)
    return f"{s.pdfs_done + s.pdfs_by_others} (this run {s.pdfs_done}, others {s.pdfs_by_others})"


def progress_line(update: ProgressUpdate) -> str:
    """One line for logs, non-TTY terminals and the progress artifact's description."""
    s = update.sample
    parts = [
        f"{s.pages_done}/{s.pages_planned} pages converted ({percent_converted(s):.0f}%)",
        f"{update.pages_per_second:.1f} pages/s",
        f"ETA {format_duration(update.eta_seconds)}",
        f"in flight {s.in_flight}",
        f"server waiting {'?' if s.server_waiting is None else s.server_waiting}",
        f"PDFs {pdfs_ok(s)} ok / {s.pdfs_failed} failed of {s.pdfs_planned}",
    ]
    if s.releases is not None:
        gate = f"gate: {s.last_decision or '-'}, {s.releases} releases, {s.pauses or 0} pauses"
        if s.paused:
            gate += f", PAUSED ({s.paused})"
        parts.append(gate)
    return " | ".join(parts)


@dataclass
class Timeline:
    """The run's samples for the chart, bounded: past `max_samples`, every other one is
    dropped and the spacing doubles, so a day-long run costs as much as a short one."""

    max_samples: int = 2000
    spacing: float = 0.0
    samples: list[ProgressSample] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.max_samples < 4:
            raise ValueError("max_samples must be at least 4")

    def add(self, sample: ProgressSample, *, force: bool = False) -> None:
        """Keep `sample` if it is at least `spacing` after the last one (or `force`)."""
        if self.samples and not force and sample.elapsed - self.samples[-1].elapsed < self.spacing:
            return
        self.samples.append(sample)
        if len(self.samples) > self.max_samples:
            last = self.samples[-1]
            self.samples = [*self.samples[:-1:2], last]
            gaps = [b.elapsed - a.elapsed for a, b in zip(self.samples, self.samples[1:], strict=False)]
            self.spacing = max(self.spacing * 2, min(gaps, default=0.0))

    def recent(self, seconds: float, now_elapsed: float) -> list[ProgressSample]:
        """Samples from the last `seconds` (oldest first), for the rate window."""
        return [s for s in self.samples if now_elapsed - s.elapsed <= seconds]


class Throttle:
    """Lets an action through at most once per `interval` seconds of a caller's clock."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._last: float | None = None

    def due(self, now: float) -> bool:
        if self._last is not None and now - self._last < self.interval:
            return False
        self._last = now
        return True


# --------------------------------------------------------------------------- the loop


async def monitor(
    sample: Callable[[], ProgressSample],
    sinks: Sequence[ProgressSink],
    timeline: Timeline,
    clock: Clock,
    *,
    interval: float = 1.0,
) -> None:
    """Sample every `interval` seconds and feed the sinks, until cancelled."""
    while True:
        await publish(sample(), sinks, timeline)
        await clock.sleep(interval)


async def publish(
    current: ProgressSample,
    sinks: Sequence[ProgressSink],
    timeline: Timeline,
    *,
    final: bool = False,
) -> ProgressUpdate:
    """Record one sample, derive the update, and give it to every sink."""
    history = timeline.recent(RATE_WINDOW_SECONDS, current.elapsed)
    update = progress_update(current, history, final=final)
    timeline.add(current, force=final)
    for sink in sinks:
        try:
            await sink(update)
        except Exception:  # a display or API hiccup must not stop the run or the others
            log.warning("progress sink %r failed", sink, exc_info=True)
    return update


def _tokens(sample: ProgressSample) -> int:
    return sample.input_tokens + sample.output_tokens


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)
