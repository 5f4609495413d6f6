"""pagegate.settle: a cancelled group or flow goes on only once all it started has ended.

asyncio.gather, cancelled, ends at its first cancelled child; a PDF whose commit was
still landing was then counted after the CLI had printed 'N PDFs committed'.
"""

from __future__ import annotations

import asyncio

import pytest

from pagegate.settle import gather_settled, settle


async def _let_the_loop_run() -> None:
    for _ in range(20):  # ample turns for a gather to notice its first cancelled child
        await asyncio.sleep(0)


def test_results_in_order_when_nothing_is_cancelled() -> None:
    async def value(v: int) -> int:
        await asyncio.sleep(0)
        return v

    async def main() -> tuple[list[int], list[int]]:
        return await gather_settled(value(v) for v in (3, 1, 2)), await gather_settled([])

    assert asyncio.run(main()) == ([3, 1, 2], [])


def test_a_cancelled_gather_ends_only_when_every_child_has() -> None:
    log: list[str] = []

    async def main() -> None:
        quick_ended, release = asyncio.Event(), asyncio.Event()
        started = [asyncio.Event(), asyncio.Event()]

        async def quick() -> None:
            try:
                started[0].set()
                await asyncio.Event().wait()
            finally:
                quick_ended.set()

        async def committing() -> None:  # its write cannot be stopped: it lands, then ends
            try:
                started[1].set()
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                await release.wait()
                log.append("commit counted")
                raise

        async def group() -> None:
            try:
                await gather_settled([quick(), committing()])
            finally:
                log.append("group ended")

        running = asyncio.ensure_future(group())
        for event in started:
            await event.wait()
        running.cancel()
        await quick_ended.wait()
        await _let_the_loop_run()
        log.append("write landed")
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(main())
    assert log == ["write landed", "commit counted", "group ended"]


def test_a_second_cancellation_does_not_lose_a_commit_under_way() -> None:
    log: list[str] = []

    async def main() -> None:
        write: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        writing = asyncio.Event()

        async def commit() -> None:  # as pagegate.ocr.job._commit
            try:
                writing.set()
                await asyncio.shield(write)
            except asyncio.CancelledError:
                await settle([write])
                log.append(f"counted {write.result()}")
                raise

        async def flow() -> None:
            try:
                await gather_settled([commit(), asyncio.Event().wait()])
            finally:
                log.append("flow ended")

        running = asyncio.ensure_future(flow())
        await writing.wait()
        running.cancel()
        await _let_the_loop_run()
        running.cancel()  # a second Ctrl-C
        await _let_the_loop_run()
        log.append("write landed")
        write.set_result("a.pdf")
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(main())
    assert log == ["write landed", "counted a.pdf", "flow ended"]


def test_a_child_cancelled_alone_cancels_the_others() -> None:
    async def main() -> bool:
        other = asyncio.ensure_future(asyncio.Event().wait())
        alone = asyncio.ensure_future(asyncio.Event().wait())
        running = asyncio.ensure_future(gather_settled([alone, other]))
        await asyncio.sleep(0)
        alone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        return other.cancelled()

    assert asyncio.run(main())
