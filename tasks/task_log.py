"""The task-run log without Prefect's empty traceback for a task that returns Failed.

A group task with a failed PDF *returns* a Failed state (tasks/ocr_group.py: its
outcome rides along as data and nothing is cached). With no retries left, Prefect's
task engine then logs "Task run failed with state: ..." with `exc_info=True`
(prefect/task_engine.py, `handle_retry`, since PrefectHQ/prefect#18240 made returned
Failed states retryable). No exception is being handled at that point, so the record's
exc_info is `(None, None, None)` and every formatter prints a bare `NoneType: None`
line under it, in the terminal and in the UI's log. The line itself repeats the one
Prefect logs right after it, "Finished in state Failed(...)".

`quiet_returned_failures()` puts a filter on Prefect's task-run logger that drops
that record and clears any other empty exc_info, so a real traceback is never hidden.
"""

from __future__ import annotations

import logging

TASK_RUN_LOGGER = "prefect.task_runs"
_RETURNED_FAILURE = "Task run failed with state:"
_NO_EXCEPTION = (None, None, None)


class EmptyTracebackFilter(logging.Filter):
    """Drops Prefect's duplicate line for a returned Failed state; keeps real tracebacks."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info != _NO_EXCEPTION:
            return True
        if record.getMessage().startswith(_RETURNED_FAILURE):
            return False  # "Finished in state Failed(...)" follows with the same message
        record.exc_info = None  # logged with exc_info=True outside an except block
        return True


def quiet_returned_failures(logger_name: str = TASK_RUN_LOGGER) -> None:
    """Install the filter once on this process's task-run logger (idempotent)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, EmptyTracebackFilter) for f in logger.filters):
        logger.addFilter(EmptyTracebackFilter())
