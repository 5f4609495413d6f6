"""The run's stop switch for a workspace that stopped taking writes.

A full disk, a denied PutObject or a deleted bucket holds for every later write, so each
page rendered and sent after it is GPU time thrown away. The first WriteRefusedError of
a commit or a ledger record trips the switch; from then on no PDF is fetched and no page
is rendered or sent. Pages already on the server finish, and their PDF is committed if
the workspace takes it after all; every other PDF of the run ends `stopped`: no ledger
record (nothing is wrong with it), and the rerun of the same command does it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from pagegate.errors import WriteRefusedError

log = logging.getLogger("pagegate.pdf")


class Halt:
    """Tripped once, by the first lasting write failure; checked before new work."""

    def __init__(self) -> None:
        self.error: WriteRefusedError | None = None
        self._waiting: set[asyncio.Task[object]] = set()
        self._ended: set[asyncio.Task[object]] = set()

    def trip(self, error: WriteRefusedError) -> None:
        if self.error is None:
            self.error = error
            log.error("the workspace stopped taking writes (%s); no new page is sent", error)
            for task in self._waiting - self._ended:
                self._ended.add(task)
                task.cancel()

    @contextlib.asynccontextmanager
    async def waiting(self) -> AsyncIterator[None]:
        """Around a page's wait for admission: a trip ends the wait with the tripping
        error, instead of a permit taken only to be handed back (behind a gate that
        paces its releases, that hand-back alone could take minutes). The admission
        settles a cancelled waiter itself."""
        self.check()
        task = asyncio.current_task()
        assert task is not None
        self._waiting.add(task)
        try:
            yield
        except asyncio.CancelledError:
            if task not in self._ended:
                raise
            self._ended.discard(task)
            task.uncancel()
            assert self.error is not None
            raise self.error from None
        finally:
            self._waiting.discard(task)

    def check(self) -> None:
        """Raise the tripping error: the caller's work must not start."""
        if self.error is not None:
            raise self.error
