"""Waits raced against the injected clock, so that fake and scaled time bound them too.

asyncio.wait_for would time out on the event loop's own clock; the gate and the router
measure every deadline on the clock they were given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from pagegate.clock import Clock

T = TypeVar("T")


async def wait_for_event(event: asyncio.Event, clock: Clock, delay: float) -> None:
    """Until `event` is set or `delay` seconds pass on `clock`, whichever comes first."""
    waker = asyncio.ensure_future(event.wait())
    timer = asyncio.ensure_future(clock.sleep(delay))
    try:
        await asyncio.wait({waker, timer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (waker, timer):
            task.cancel()
        await asyncio.gather(waker, timer, return_exceptions=True)


async def within(awaitable: Awaitable[T], clock: Clock, seconds: float, what: str) -> T:
    """The awaitable's result, or TimeoutError ("`what` took over ...") once `seconds`
    pass on `clock`."""
    work = asyncio.ensure_future(awaitable)
    timer = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait({work, timer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (work, timer):
            if not task.done():
                task.cancel()
        await asyncio.gather(work, timer, return_exceptions=True)
    if work.cancelled():
        raise TimeoutError(f"{what} took over {seconds} s")
    return work.result()
