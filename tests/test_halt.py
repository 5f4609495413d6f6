"""The run's halt (pagegate.ocr.halt): a trip ends the waits for admission at once.

Each case is one event loop with FixedLimit(1) holding its only slot, so a second page
waits; the loop runs the waiter up to its wait with one `sleep(0)`, which is exact in
asyncio (a new task runs to its first real await in the next iteration).
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import pytest

from pagegate.admission.base import FixedLimit
from pagegate.errors import WriteRefusedError
from pagegate.ocr.halt import Halt

FULL = WriteRefusedError("cannot write /ws/results/a.jsonl: no space", cause="ENOSPC")


async def admitted(halt: Halt, limit: FixedLimit) -> str:
    async with AsyncExitStack() as stack:
        async with halt.waiting():
            await stack.enter_async_context(limit.slot("g"))
        return "admitted"


def test_a_trip_ends_a_wait_for_admission_with_the_tripping_error() -> None:
    async def scenario() -> None:
        halt, limit = Halt(), FixedLimit(1)
        async with limit.slot("g"):
            waiter = asyncio.create_task(admitted(halt, limit))
            await asyncio.sleep(0)
            assert limit.queued == 1
            halt.trip(FULL)
            done, _ = await asyncio.wait({waiter}, timeout=30)  # guards a hang, never met
            assert done, "the trip left the page waiting"
            with pytest.raises(WriteRefusedError) as caught:
                await waiter
            assert caught.value is FULL and not waiter.cancelled()
            assert limit.queued == 0  # the admission let the waiter go
        assert await admitted(Halt(), limit) == "admitted"  # and its slot is whole

    asyncio.run(scenario())


def test_a_tripped_halt_lets_no_new_page_wait() -> None:
    async def scenario() -> None:
        halt, limit = Halt(), FixedLimit(1)
        halt.trip(FULL)
        with pytest.raises(WriteRefusedError):
            await admitted(halt, limit)
        assert limit.queued == 0 and limit.in_flight == 0

    asyncio.run(scenario())


def test_a_cancel_from_elsewhere_stays_a_cancel() -> None:
    async def scenario() -> None:
        halt, limit = Halt(), FixedLimit(1)
        async with limit.slot("g"):
            waiter = asyncio.create_task(admitted(halt, limit))
            await asyncio.sleep(0)
            waiter.cancel()  # Ctrl-C, not the halt
            with pytest.raises(asyncio.CancelledError):
                await waiter
            assert halt.error is None

    asyncio.run(scenario())


def test_a_page_admitted_before_the_trip_keeps_its_permit() -> None:
    async def scenario() -> None:
        halt, limit = Halt(), FixedLimit(2)
        assert await admitted(halt, limit) == "admitted"
        halt.trip(FULL)  # nothing waits: nothing to end
        assert limit.in_flight == 0

    asyncio.run(scenario())
