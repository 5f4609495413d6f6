"""Run a Prefect flow from the command line as a real flow run, with the live display.

Prefect is imported here only when a command runs a flow, so `pagegate sim` and
`--help` stay quick.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from pagegate.cli.stopping import STOPPER
from pagegate.errors import RunInterrupted
from pagegate.heap import bound_heap


def run_stoppable(main: Callable[[], Awaitable[Any]]) -> tuple[Any, int | None]:
    """Run `main()` in its own event loop on a worker thread; (its result, the stop signal).

    A stop signal (pagegate.cli.stopping) cancels the flow's task, so it ends through
    asyncio's cancellation path: every `async with` closes (render workers, a launched
    server, the HTTP client), Prefect marks the run, and nothing is half-written. In the
    main thread Prefect would install its own SIGTERM handler, whose TerminationSignal
    lands in whichever asyncio task happens to be running and is lost there (the run
    went on); on a worker thread it installs none. Context variables (the progress
    listener) are carried over to the worker.
    """
    STOPPER.check()  # a signal before the flow began
    running: dict[str, Any] = {}
    finished = threading.Event()
    cancelled = threading.Event()

    async def guarded() -> Any:
        running["loop"], running["task"] = asyncio.get_running_loop(), asyncio.current_task()
        if cancelled.is_set():  # the signal came while this thread started
            raise asyncio.CancelledError
        return await main()

    def work() -> None:
        try:
            running["result"] = asyncio.run(guarded())
        except BaseException as exc:  # handed to the main thread below
            running["error"] = exc
        finally:
            finished.set()

    def cancel() -> None:
        cancelled.set()
        loop, task = running.get("loop"), running.get("task")
        if loop is not None and task is not None:
            loop.call_soon_threadsafe(task.cancel)

    worker = threading.Thread(target=contextvars.copy_context().run, args=(work,),
                              name="pagegate-flow", daemon=True)
    with STOPPER.cancelling(cancel):
        worker.start()
        while not finished.wait(0.5):  # wakes for signals; the handlers run in this thread
            pass
    if STOPPER.signum is not None:
        return None, STOPPER.signum
    if "error" in running:
        raise running["error"]
    return running["result"], None


def prefect_env() -> None:
    """Send pagegate's own loggers to the Prefect run log; keep telemetry off by default.

    pypdf warns about every repair it makes on a damaged file; the failure ledger already
    records what matters, so only its errors reach the log.
    """
    bound_heap()  # before Prefect's threads start (pagegate/heap.py)
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "pagegate")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    # Prefect gives extra loggers its handlers but not a level (root: WARNING); a launched
    # server's output and the watchdog's notes are INFO and belong in the run log.
    for name in ("pagegate.vllm", "pagegate.server", "pagegate.router"):
        logging.getLogger(name).setLevel(logging.INFO)


def run_flow_state(start: Callable[[], Awaitable[Any]]) -> tuple[bool, dict[str, Any]]:
    """Run `start()` (a flow called with return_state=True); (completed?, summary).

    The live display (stderr) is handed to the flow through a context variable, set
    before the flow's event loop starts so its tasks inherit it. With no PREFECT_API_URL
    the temporary Prefect server is started here (pagegate.cli.prefect_server). SIGINT and SIGTERM
    raise RunInterrupted with the display's last figures.
    """
    from pagegate.cli.prefect_server import temporary_prefect_server
    from pagegate.report.display import TerminalProgress
    from pagegate.report.progress import PROGRESS_LISTENER

    with temporary_prefect_server(), TerminalProgress() as display:
        token = PROGRESS_LISTENER.set(display)
        STOPPER.last_progress = lambda: display.last  # the figures an interrupt reports
        try:
            state, stopped_by = run_stoppable(start)
        finally:
            PROGRESS_LISTENER.reset(token)
        if stopped_by is not None:
            raise RunInterrupted(stopped_by, display.last)
        data = state.result(raise_on_failure=False)
        if asyncio.iscoroutine(data):
            data = asyncio.run(data)
    summary = data if isinstance(data, dict) else {"message": state.message}
    return bool(state.is_completed()), summary


def run_flow(**params: Any) -> tuple[bool, dict[str, Any]]:
    """Run the ocr-pdfs flow with these parameters (`pagegate demo`); (completed?, summary)."""
    prefect_env()
    from pagegate.flows.ocr_pdfs import ocr_pdfs

    return run_flow_state(lambda: ocr_pdfs(**params, return_state=True))
