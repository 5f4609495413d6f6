"""Run a Prefect flow from the command line as a real flow run, with the live display.

Prefect is imported here only when a command runs a flow, so `pagegate sim` and
`--help` stay quick.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any


def prefect_env() -> None:
    """Send pagegate's own loggers to the Prefect run log; keep telemetry off by default.

    pypdf warns about every repair it makes on a damaged file; the failure ledger already
    records what matters, so only its errors reach the log.
    """
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
    before the flow's event loop starts so its tasks inherit it.
    """
    from pagegate.report.display import TerminalProgress
    from pagegate.report.progress import PROGRESS_LISTENER

    async def main() -> Any:
        return await start()

    with TerminalProgress() as display:
        token = PROGRESS_LISTENER.set(display)
        try:
            state = asyncio.run(main())
        finally:
            PROGRESS_LISTENER.reset(token)
    data = state.result(raise_on_failure=False)
    if asyncio.iscoroutine(data):
        data = asyncio.run(data)
    summary = data if isinstance(data, dict) else {"message": state.message}
    return bool(state.is_completed()), summary


def run_flow(**params: Any) -> tuple[bool, dict[str, Any]]:
    """Run the ocr-pdfs flow with these parameters (`pagegate demo`); (completed?, summary)."""
    prefect_env()
    from flows.ocr_pdfs import ocr_pdfs

    return run_flow_state(lambda: ocr_pdfs(**params, return_state=True))
