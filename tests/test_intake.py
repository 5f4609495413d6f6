"""pagegate.ocr.intake: a PDF is fetched only when the run is short of pages, under the
byte budget, first come first served, and one PDF always runs however large."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import pytest

from pagegate.ocr.intake import Entry, Intake


def _intake(budget: int = 100, fetching: int = 2, ahead: int = 10) -> Intake:
    return Intake(budget_bytes=budget, max_fetching=fetching, pages_ahead=lambda: ahead)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_entries_past_the_fetch_limit_wait_until_one_is_inspected() -> None:
    async def run() -> list[int]:
        intake = _intake(fetching=2)
        seen: list[int] = []
        entries: list[Entry] = []
        async with AsyncExitStack() as stack:
            async def enter(n: int) -> None:
                entries.append(await stack.enter_async_context(intake.enter()))
                seen.append(n)

            tasks = [asyncio.ensure_future(enter(n)) for n in range(4)]
            await _settle()
            first = list(seen)
            entries[0].fetched(1)
            await _settle()
            second = list(seen)
            for entry in entries[1:]:
                entry.fetched(1)
            await asyncio.gather(*tasks)
            return [len(first), len(second), len(seen)]

    assert asyncio.run(run()) == [2, 3, 4]


@pytest.mark.parametrize(
    ("held", "pages", "may_enter"),
    [(0, 0, True), (99, 9, True), (100, 0, False), (0, 10, False), (150, 0, False)],
)
def test_the_budget_and_the_pages_ahead_decide(held: int, pages: int, may_enter: bool) -> None:
    async def run() -> bool:
        intake = _intake(budget=100, ahead=10)
        async with intake.enter() as first:
            first.hold(held)
            first.fetched(pages)
            waiter = asyncio.ensure_future(intake.enter().__aenter__())
            await _settle()
            entered = waiter.done()
            waiter.cancel()
            return entered

    assert asyncio.run(run()) is may_enter


def test_pages_finishing_and_entries_ending_let_the_next_in_in_order() -> None:
    async def run() -> list[str]:
        intake = _intake(budget=100, ahead=4)
        order: list[str] = []

        async def pdf(name: str, pages: int, nbytes: int, done: asyncio.Event) -> None:
            async with intake.enter() as entry:
                order.append(name)
                entry.hold(nbytes)
                entry.fetched(pages)
                await done.wait()
                for _ in range(pages):
                    entry.page_done()

        events = {name: asyncio.Event() for name in "abc"}
        tasks = [asyncio.ensure_future(pdf("a", 4, 10, events["a"])),
                 asyncio.ensure_future(pdf("b", 1, 10, events["b"])),
                 asyncio.ensure_future(pdf("c", 1, 10, events["c"]))]
        await _settle()
        waiting = list(order)
        events["a"].set()
        await _settle()
        events["b"].set()
        events["c"].set()
        await asyncio.gather(*tasks)
        assert intake.held_bytes == 0 and intake.pages == 0
        return [*waiting, "|", *order]

    assert asyncio.run(run()) == ["a", "|", "a", "b", "c"]


def test_one_pdf_larger_than_the_budget_still_runs_alone() -> None:
    async def run() -> tuple[int, bool]:
        intake = _intake(budget=100)
        async with intake.enter() as big:
            big.hold(10_000)
            big.fetched(1)
            other = asyncio.ensure_future(intake.enter().__aenter__())
            await _settle()
            blocked = not other.done()
            other.cancel()
        return intake.peak_held_bytes, blocked

    assert asyncio.run(run()) == (10_000, True)


def test_a_cancelled_waiter_gives_its_turn_to_the_next() -> None:
    async def run() -> bool:
        intake = _intake(fetching=1)
        async with intake.enter():
            cancelled = asyncio.ensure_future(intake.enter().__aenter__())
            nxt = asyncio.ensure_future(intake.enter().__aenter__())
            await _settle()
            cancelled.cancel()
            await _settle()
        await _settle()
        done = nxt.done()
        nxt.cancel()
        return done

    assert asyncio.run(run())
