"""The run's preflight inside a flow: deployment runs get the checks the CLI makes.

A deployment run has no CLI in front of it, so a flow checks again (pagegate.ocr.preflight)
once its settings are resolved, before anything is planned or sent. A failure ends the
flow run Failed at once, its message the same line the CLI prints; its result data lets
the CLI pick the exit code when the check that failed was one only the flow could make
(credentials from a prefect-aws block).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prefect import State, get_run_logger
from prefect.exceptions import ObjectNotFound
from prefect.states import Failed

from pagegate.config import RunConfig
from pagegate.errors import PreflightError
from pagegate.ocr.preflight import Preflight, failure_data, run_preflight


async def preflight_failure(config: RunConfig, *, check_sources: bool = True) -> State[Any] | None:
    """None when the run may start; else the Failed state the flow returns."""
    check = Preflight(
        workspace=config.workspace,
        sources=config.sources if check_sources else (),
        servers=() if config.managed_server is not None else config.servers,
        model=config.model,
        s3_credentials=config.s3_credentials,
        s3_retry_mode=config.s3_retry_mode,
    )
    try:
        await asyncio.to_thread(run_preflight, check)
    except PreflightError as exc:
        return preflight_failed(exc)
    return None


def preflight_failed(exc: PreflightError) -> State[Any]:
    """The Failed state a flow stopped before its start returns: the CLI's line as message."""
    get_run_logger().error("preflight: %s", exc)
    return Failed(message=str(exc), data=failure_data(exc))


@contextmanager
def named_block(kind: str, name: str, flag: str) -> Iterator[None]:
    """A block the run names that Prefect does not have is a preflight error in the flag's
    terms, not a traceback (Block.aload raises ValueError from Prefect's ObjectNotFound)."""
    try:
        yield
    except ValueError as exc:
        if not isinstance(exc.__cause__, ObjectNotFound):
            raise
        raise PreflightError(
            f"no {kind} block named {name!r}: create it, or pass another {flag}") from exc
