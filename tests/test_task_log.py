"""Prefect's line for a task that returned Failed, without its empty traceback (tasks/task_log.py).

The records are what Prefect's task engine logs (prefect/task_engine.py, handle_retry):
`logger.error(..., exc_info=True)` outside any except block.
"""

from __future__ import annotations

import io
import logging
import uuid

from pagegate.tasks.task_log import EmptyTracebackFilter, quiet_returned_failures


def _logger() -> tuple[logging.Logger, io.StringIO]:
    logger = logging.getLogger(f"test-task-log-{uuid.uuid4().hex}")
    logger.propagate = False
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    return logger, out


def test_without_the_filter_the_formatter_prints_nonetype_none() -> None:
    logger, out = _logger()
    logger.error("Task run failed with state: Failed(message='1 of 4 PDF(s) failed')", exc_info=True)
    assert "NoneType: None" in out.getvalue()


def test_the_duplicate_line_goes_and_other_empty_tracebacks_lose_only_the_traceback() -> None:
    logger, out = _logger()
    quiet_returned_failures(logger.name)
    quiet_returned_failures(logger.name)  # idempotent: one filter
    assert sum(isinstance(f, EmptyTracebackFilter) for f in logger.filters) == 1
    logger.error("Task run failed with state: Failed(message='1 of 4 PDF(s) failed')", exc_info=True)
    logger.error("Finished in state Failed('1 of 4 PDF(s) failed')")
    logger.error("something else", exc_info=True)
    assert out.getvalue().splitlines() == [
        "ERROR Finished in state Failed('1 of 4 PDF(s) failed')",
        "ERROR something else",
    ]


def test_a_real_traceback_is_kept() -> None:
    logger, out = _logger()
    quiet_returned_failures(logger.name)
    try:
        raise ValueError("boom")
    except ValueError:
        logger.error("Task run failed with exception: ValueError('boom')", exc_info=True)
    assert "Traceback" in out.getvalue() and "ValueError: boom" in out.getvalue()
