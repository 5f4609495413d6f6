"""SIGINT and SIGTERM for the commands that run flows, from their first line to their last.

`pagegate run`, `reprocess` and `demo` install these handlers before they import Prefect,
so no moment of a run is left to Python's defaults (a SIGTERM that kills the process and
leaves its temporary Prefect server running; a KeyboardInterrupt that a library swallows).

- The first signal, while the flow runs, cancels the flow's task (`cancelling`): it ends
  through asyncio's cancellation path and the CLI reports what was committed.
- The first signal at any other moment (start-up, preflight, the temporary server's
  start, the summary) raises RunInterrupted in the main thread, so every `with` block
  on the way out closes what it opened. A BaseException, like KeyboardInterrupt: an
  `except Exception` in a library must not swallow it.
- A second signal stops at once: one line says so, every process this one started is
  killed, and the exit code is the same 130 or 143.

When the command ends, any child process still alive is terminated (psutil walks the
tree), so nothing pagegate started outlives it, whichever way it stopped.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from pagegate.errors import RunInterrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
REAP_GRACE_SECONDS = 5.0  # a terminated child's time to exit before SIGKILL (uvicorn: ~1 s)


def exit_code(signum: int) -> int:
    """The shell's code for a death by this signal: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + signum


class Stopper:
    """The process's stop handlers and what a signal does now (one instance: STOPPER)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._cancel: Callable[[], None] | None = None
        self._shielded = 0
        self.last_progress: Callable[[], Any] = lambda: None

    def install(self) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is not None:
            stop_at_once(signum)
        self.signum = signum
        if self._cancel is not None:
            self._cancel()
        elif not self._shielded:
            raise RunInterrupted(signum, self.last_progress())

    def check(self) -> None:
        """RunInterrupted if a signal came while it could not be raised."""
        if self.signum is not None:
            raise RunInterrupted(self.signum, self.last_progress())

    @contextlib.contextmanager
    def cancelling(self, cancel: Callable[[], None]) -> Iterator[None]:
        """Within it, a first signal calls `cancel` (from the main thread) instead of raising."""
        self._cancel = cancel
        try:
            if self.signum is not None:
                cancel()
            yield
        finally:
            self._cancel = None

    @contextlib.contextmanager
    def shielded(self) -> Iterator[None]:
        """Clean-up that a first signal must not cut short; a signal that came during it
        is raised once it ends (one that came before was raised already)."""
        before = self.signum
        self._shielded += 1
        try:
            yield
        finally:
            self._shielded -= 1
        if before is None and not self._shielded:
            self.check()


STOPPER = Stopper()


def stop_at_once(signum: int) -> None:
    """The second signal: say so, kill every process this one started, exit."""
    name = signal.Signals(signum).name
    with contextlib.suppress(OSError):
        os.write(2, f"second {name}: stopping at once; committed documents are whole, pages "
                    "in flight are dropped; rerun the same command to continue\n".encode())
    reap_children(grace_seconds=0.0)
    os._exit(exit_code(signum))


def reap_children(grace_seconds: float = REAP_GRACE_SECONDS) -> int:
    """Terminate every process this one started that is still alive (SIGKILL after the
    grace); how many there were. A launched vLLM's engine and workers are included: the
    walk follows parent links, not process groups."""
    import psutil

    with contextlib.suppress(psutil.Error):
        children = psutil.Process().children(recursive=True)
        if not children:
            return 0
        for child in children:
            with contextlib.suppress(psutil.Error):
                (child.terminate if grace_seconds > 0 else child.kill)()
        _gone, alive = psutil.wait_procs(children, timeout=grace_seconds)
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()
        psutil.wait_procs(alive, timeout=5)
        return len(children)
    return 0
