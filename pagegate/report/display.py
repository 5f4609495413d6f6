"""The terminal view of a run for `pagegate run`: a live panel on a TTY, plain lines otherwise.

On a terminal, a rich `Live` panel at the bottom shows pages settled/planned with a bar,
pages/s, ETA, pages in flight, the server's waiting queue and the gate's last decision,
while log lines scroll above it. Log handlers that write to the terminal through their
own rich Console (Prefect's console handler) or a plain stream are pointed at Live's
stderr proxy while the panel is up, so their lines print above the panel instead of
through it; they are restored on exit.

Anywhere else (a pipe, a CI log, a file) there is no cursor movement at all: one plain
progress line every `plain_interval` seconds and a last one at the end, on stderr, so
stdout stays exactly what it was (the summary, or `--json`).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from pagegate.report.progress import (
    ProgressUpdate,
    Throttle,
    format_duration,
    pdfs_ok,
    percent_converted,
    progress_line,
)


def render_update(update: ProgressUpdate) -> Group:
    """The live panel for one update (pure: a renderable, no I/O)."""
    s = update.sample
    head = Table.grid(padding=(0, 1), expand=True)
    head.add_column(ratio=1)
    head.add_column(justify="right", no_wrap=True)
    head.add_row(
        ProgressBar(
            total=max(1, s.pages_planned),
            completed=s.pages_done,
            # explicit colours: the panel is also drawn by Prefect's console, whose theme
            # has none of rich's named styles ("bar.back", ...)
            style="grey23",
            complete_style="magenta",
            finished_style="green",
            pulse_style="white",
        ),
        f"{s.pages_done}/{s.pages_planned} pages converted {percent_converted(s):3.0f}%",
    )
    waiting = "?" if s.server_waiting is None else str(s.server_waiting)
    rates = Text.assemble(
        (f"{update.pages_per_second:.1f} pages/s", "bold"),
        f"  ETA {format_duration(update.eta_seconds)}",
        f"  in flight {s.in_flight}",
        f"  server waiting {waiting}",
        f"  PDFs {pdfs_ok(s)} ok / {s.pdfs_failed} failed of {s.pdfs_planned}",
    )
    lines: list[Any] = [head, rates]
    if s.releases is not None:
        gate = Text.assemble(
            "gate: ",
            (s.last_decision or "-", "cyan"),
            f"  {s.releases} releases  {s.pauses or 0} pauses",
        )
        if s.paused:
            gate.append(f"  PAUSED ({s.paused})", style="bold yellow")
        lines.append(gate)
    return Group(*lines)


class TerminalProgress:
    """A progress sink (`await display(update)`) for one run; use as a context manager."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        plain_interval: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.console = Console(file=self.stream, stderr=self.stream is sys.stderr)
        self.live_mode = self.console.is_terminal and not self.console.is_dumb_terminal
        self._clock = clock
        self._plain = Throttle(plain_interval)
        self._live: Live | None = None
        self._redirected: list[tuple[Any, Any]] = []
        self.last: ProgressUpdate | None = None  # for a partial summary when the run is stopped

    def __enter__(self) -> TerminalProgress:
        if self.live_mode:
            self._live = Live(
                Text("planning..."),
                console=self.console,
                auto_refresh=False,
                redirect_stdout=True,
                redirect_stderr=True,
                transient=False,
            )
            self._live.start()
            self._redirect_log_handlers()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._restore_log_handlers()
        if self._live is not None:
            self._live.stop()
            self._live = None

    async def __call__(self, update: ProgressUpdate) -> None:
        self.show(update)

    def show(self, update: ProgressUpdate) -> None:
        self.last = update
        if self._live is not None:
            self._live.update(render_update(update), refresh=True)
        elif update.final or self._plain.due(self._clock()):
            self.stream.write(f"progress: {progress_line(update)}\n")
            self.stream.flush()

    # ---------------------------------------------------------------- log handlers

    def _redirect_log_handlers(self) -> None:
        """Make terminal log handlers print above the panel while it is up.

        A handler with its own rich Console (Prefect's) gets the Live as a render hook,
        which is how Live moves its panel below whatever a console prints (setting the
        console's file to Live's proxy would not do: rich unwraps the proxy). A plain
        stream handler is pointed at Live's stderr proxy, which prints through Live.
        """
        assert self._live is not None
        real = {id(sys.__stderr__), id(sys.__stdout__), id(self.stream)}
        for handler in _all_handlers():
            rich_console = getattr(handler, "console", None)
            if isinstance(rich_console, Console):
                if rich_console is not self.console and id(rich_console.file) in real:
                    rich_console.push_render_hook(self._live)
                    self._redirected.append((rich_console, None))
            elif isinstance(handler, logging.StreamHandler) and id(handler.stream) in real:
                self._redirected.append((handler, handler.stream))
                handler.setStream(sys.stderr)  # Live's FileProxy while the panel is up

    def _restore_log_handlers(self) -> None:
        for target, stream in reversed(self._redirected):
            if isinstance(target, Console):
                target.pop_render_hook()
            else:
                target.setStream(stream)
        self._redirected.clear()


def _all_handlers() -> list[logging.Handler]:
    loggers: list[logging.Logger] = [logging.getLogger()]
    loggers += [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    seen: dict[int, logging.Handler] = {}
    for lg in loggers:
        for handler in lg.handlers:
            seen.setdefault(id(handler), handler)
    return list(seen.values())
