"""When a PDF may be fetched: just ahead of admission, under a byte budget.

Every PDF of every running group is started at once (the admission gate decides how
fast pages go out), but a PDF is only *fetched* when the run is short of pages for the
admission to hand out. So what a run holds follows what it admits, not how large a group
is or how many groups run (`--workers`). A PDF enters, in arrival order, when either
nothing is entered at all (so one PDF always runs, however large), or all of:

* fewer than `max_fetching` entered PDFs are still being fetched and inspected;
* the PDF bytes held in memory are under `budget_bytes`;
* the pages of entered PDFs not yet finished are fewer than `pages_ahead()` (the run
  asks the admission how many pages it lets in flight now, and keeps three times that:
  pagegate.ocr.run.pages_ahead).

A PDF held in memory counts its bytes until it is done; one opened from a file (large, or
arriving when the budget is full) counts none. Nothing waits on anything but finishing
pages and PDFs, so entry cannot deadlock: every counted byte and page belongs to a PDF
whose pages are at the admission already.

Pure bookkeeping with asyncio futures; no clock, no I/O.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass


@dataclass
class _Counts:
    entered: int = 0
    fetching: int = 0
    held_bytes: int = 0
    pages: int = 0
    peak_held_bytes: int = 0


class Entry:
    """One entered PDF's share of the intake; `Intake.enter` hands it out and takes it back."""

    def __init__(self, intake: Intake) -> None:
        self._intake = intake
        self._fetching = True
        self._bytes = 0
        self._pages = 0

    def hold(self, nbytes: int) -> None:
        """The PDF now holds `nbytes` of memory (until the entry ends)."""
        self._bytes += nbytes
        self._intake._add(held_bytes=nbytes)

    def fetched(self, pages: int) -> None:
        """Fetched and inspected: `pages` pages go to the admission."""
        if self._fetching:
            self._fetching = False
            self._pages += pages
            self._intake._add(fetching=-1, pages=pages)

    def page_done(self) -> None:
        if self._pages > 0:
            self._pages -= 1
            self._intake._add(pages=-1)

    def _close(self) -> None:
        self._intake._add(entered=-1, fetching=-int(self._fetching), held_bytes=-self._bytes,
                          pages=-self._pages)
        self._fetching, self._bytes, self._pages = False, 0, 0


class Intake:
    """The run's gate for fetching PDFs (see the module doc)."""

    def __init__(self, *, budget_bytes: int, max_fetching: int,
                 pages_ahead: Callable[[], int]) -> None:
        if budget_bytes < 1 or max_fetching < 1:
            raise ValueError("budget_bytes and max_fetching must be at least 1")
        self.budget_bytes = budget_bytes
        self.max_fetching = max_fetching
        self._pages_ahead = pages_ahead
        self._counts = _Counts()
        self._waiting: deque[asyncio.Future[None]] = deque()

    @property
    def held_bytes(self) -> int:
        return self._counts.held_bytes

    @property
    def peak_held_bytes(self) -> int:
        return self._counts.peak_held_bytes

    @property
    def pages(self) -> int:
        return self._counts.pages

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def fits(self, nbytes: int) -> bool:
        """Whether `nbytes` more can be held in memory without passing the budget."""
        return self._counts.held_bytes + nbytes <= self.budget_bytes

    def _may_enter(self) -> bool:
        c = self._counts
        if c.entered == 0:
            return True
        return (c.fetching < self.max_fetching and c.held_bytes < self.budget_bytes
                and c.pages < self._pages_ahead())

    @asynccontextmanager
    async def enter(self) -> AsyncIterator[Entry]:
        """Wait for this PDF's turn (first come, first served); the entry ends on exit."""
        if self._waiting or not self._may_enter():
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append(future)
            try:
                await future
            except asyncio.CancelledError:
                if future in self._waiting:
                    self._waiting.remove(future)
                elif future.done() and not future.cancelled():
                    self._add(entered=-1, fetching=-1)  # admitted, then cancelled
                raise
        else:
            self._add(entered=1, fetching=1)
        entry = Entry(self)
        try:
            yield entry
        finally:
            entry._close()

    def _add(self, *, entered: int = 0, fetching: int = 0, held_bytes: int = 0,
             pages: int = 0) -> None:
        c = self._counts
        c.entered += entered
        c.fetching += fetching
        c.held_bytes += held_bytes
        c.pages += pages
        c.peak_held_bytes = max(c.peak_held_bytes, c.held_bytes)
        self._admit_waiting()

    def _admit_waiting(self) -> None:
        while self._waiting and self._may_enter():
            future = self._waiting.popleft()
            if future.done():
                continue
            c = self._counts
            c.entered += 1
            c.fetching += 1
            future.set_result(None)
