"""How a command ends: its exit code, and one line for a user error instead of a traceback.

The exit codes are documented (README, docs/operations.md) so scripts can branch on them:

    0    every PDF converted (or already done)
    1    some PDFs failed (the ledger says why), or most pages fell back to the text layer
    2    usage or preflight error: nothing was sent to the server
    3    the server was unavailable (at the start, or for PDFs that waited past the deadline)
    4    the workspace stopped taking writes mid-run (full, access denied, bucket gone):
         no new page was sent; free space or fix access, then rerun the same command
    130  interrupted by SIGINT (Ctrl-C)
    143  stopped by SIGTERM

A user error prints `error: <what is wrong and what to do>` on stderr and nothing else.
An unexpected exception prints one line too, and its traceback goes to the log file
(`--debug` prints it as well).
"""

from __future__ import annotations

import os
import signal
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import typer

from pagegate.cli.stopping import exit_code
from pagegate.errors import PreflightError, RunInterrupted, ServerUnreachableError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_SERVER = 3
EXIT_STORAGE = 4
EXIT_SIGINT = exit_code(signal.SIGINT)    # 130, the shell's code for a death by SIGINT
EXIT_SIGTERM = exit_code(signal.SIGTERM)  # 143

SERVER_REASON = "server_unavailable"


def log_path() -> Path:
    """Where tracebacks of unexpected errors go: $PAGEGATE_LOG, else the user's cache folder."""
    explicit = os.environ.get("PAGEGATE_LOG", "").strip()
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(cache) / "pagegate" / "pagegate.log"


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print the one line and exit."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def preflight_exit_code(exc: PreflightError) -> int:
    return EXIT_SERVER if isinstance(exc, ServerUnreachableError) else EXIT_USAGE


@contextmanager
def one_line_errors(*, debug: bool) -> Iterator[None]:
    """Turn pagegate's user errors and unexpected exceptions into one line and an exit code."""
    try:
        yield
    except PreflightError as exc:
        if debug:
            traceback.print_exc()
        fail(str(exc), preflight_exit_code(exc))
    except RunInterrupted as exc:
        report_stopped(exc)
    except (typer.Exit, typer.Abort, KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # a bug: one line here, the traceback in the log file
        where = _log_traceback(exc)
        if debug:
            traceback.print_exc()
        fail(f"{type(exc).__name__}: {exc} (traceback in {where})", EXIT_FAILED)


def report_stopped(exc: RunInterrupted) -> NoReturn:
    """The stopped run's lines, then exit 130 or 143."""
    raise typer.Exit(stopped_line(exc))


def stopped_line(exc: RunInterrupted) -> int:
    """pagegate's own line for a stopped run and its partial summary; the exit code.

    Nothing is half-written: results and ledger records are whole-object writes, so
    what was committed is done and the rerun skips it; the rest is simply not there.
    """
    sample = exc.last.sample if exc.last is not None else None
    committed = sample.pdfs_done if sample is not None else 0
    name = signal.Signals(exc.signum).name
    typer.echo(
        f"interrupted by {name}: {committed} PDFs committed; rerun the same command to continue",
        err=True,
    )
    if sample is not None:
        typer.echo(
            f"PDFs ok: {sample.pdfs_done}  failed: {sample.pdfs_failed}  "
            f"not done: {max(0, sample.pdfs_planned - sample.pdfs_done - sample.pdfs_failed)}  "
            f"pages: {sample.pages_done}  fallback pages: {sample.fallback_pages}"
        )
    return exit_code(exc.signum)


def _log_traceback(exc: BaseException) -> str:
    path = log_path()
    text = "".join(traceback.format_exception(exc))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as log:
            log.write(f"--- {datetime.now(UTC).isoformat(timespec='seconds')} pid {os.getpid()}\n{text}")
    except OSError:
        return "no log file: it could not be written; rerun with --debug"
    return str(path)


def run_exit_code(completed: bool, summary: Mapping[str, Any]) -> int:
    """0, 1 or 3 for a run that ended on its own (3 when the server kept PDFs from running)."""
    if completed:
        return EXIT_OK
    reasons = {row.get("reason") for row in summary.get("failed", ())}
    return EXIT_SERVER if SERVER_REASON in reasons else EXIT_FAILED
