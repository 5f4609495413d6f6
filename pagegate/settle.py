"""Await many tasks so that a cancellation goes on only once every one of them has ended.

asyncio.gather, when cancelled, cancels its children and then ends as soon as the first
of them has ended: the others go on with nobody awaiting them. A PDF whose commit thread
was still writing then had its result on disk but was counted only after the run had
been reported stopped (the CLI's 'interrupted: N PDFs committed' was short). Here a
cancelled group waits for all its PDFs, and a cancelled flow for all its groups, before
the cancellation goes on: what the run reports then is everything it did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


async def gather_settled(aws: Iterable[Awaitable[T]]) -> list[T]:
    """asyncio.gather's results; cancelled, it re-raises only once every child has ended.

    A cancelled gather has cancelled every child already (cancelling one twice would cut
    short its clean-up); only when a child alone was cancelled are the others cancelled
    here, as asyncio.TaskGroup would.
    """
    tasks = [asyncio.ensure_future(aw) for aw in aws]
    try:
        return await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and not current.cancelling():
            for task in tasks:
                task.cancel()
        await settle(tasks)
        raise


async def settle(futures: Iterable[asyncio.Future[Any]]) -> None:
    """Wait until every one of `futures` is done, through further cancellations.

    For an `except CancelledError:` block that re-raises afterwards: a second cancellation
    (a second Ctrl-C) must not cut short the wait for what is already ending.
    """
    pending = {f for f in futures if not f.done()}
    while pending:
        try:
            _, pending = await asyncio.wait(pending)
        except asyncio.CancelledError:
            continue  # the caller re-raises its own cancellation once all are done
