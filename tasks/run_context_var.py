"""How group tasks reach the run's live objects without taking them as parameters.

A Prefect task's parameters are hashed for its cache key and recorded for the UI, so
they must be plain data. The flow sets this context variable to the run's RunContext
(built in the flow's event loop); tasks awaited in that loop inherit it.
"""

from __future__ import annotations

from contextvars import ContextVar

from pagegate.ocr.run import RunContext

RUN_CONTEXT: ContextVar[RunContext] = ContextVar("pagegate_run_context")


def current_run_context() -> RunContext:
    try:
        return RUN_CONTEXT.get()
    except LookupError:
        raise RuntimeError(
            "no pagegate run context: group tasks must be awaited inside the ocr_pdfs flow"
        ) from None
