"""The gate's waiting pages and its permits.

A waiting page only waits on a future; the gate resolves it as a step says (admitted,
or failed when the gate closes or the server stays unavailable). The policy counts the
same pages (`queued`); the gate keeps both in step.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass

from pagegate.admission.base import Outcome


@dataclass(frozen=True, slots=True)
class Admitted:
    unit_id: int  # the unit whose credit the page spent
    at: float     # when it went in flight


class _Waiter(asyncio.Future[Admitted]):
    """A waiting page's future that says, as it is cancelled, that it was: a cancelled
    waiting task cancels it synchronously, before the waiter's own handler runs."""

    def __init__(self, on_cancel: Callable[[], None]) -> None:
        super().__init__()
        self._on_cancel = on_cancel

    def cancel(self, msg: object = None) -> bool:
        cancelled = super().cancel(msg)
        if cancelled:
            self._on_cancel()
        return cancelled


class Waiters:
    """Pages waiting at the gate, oldest first."""

    def __init__(self) -> None:
        self._queue: collections.deque[asyncio.Future[Admitted]] = collections.deque()
        self._cancelled = 0  # futures cancelled since the last drop_cancelled

    def __bool__(self) -> bool:
        return bool(self._queue)

    def join(self) -> asyncio.Future[Admitted]:
        future = _Waiter(self._count_cancelled)
        self._queue.append(future)
        return future

    def _count_cancelled(self) -> None:
        self._cancelled += 1

    def next_live(self) -> asyncio.Future[Admitted] | None:
        """The oldest waiter still waiting, or None."""
        while self._queue:
            future = self._queue.popleft()
            if not future.done():
                return future
        return None

    def discard(self, future: asyncio.Future[Admitted]) -> bool:
        """Forget a waiter that gave up; False if it was already dropped."""
        try:
            self._queue.remove(future)
        except ValueError:
            return False
        return True

    def drop_cancelled(self) -> int:
        """Forget the waiters cancelled but not yet settled by their own handler (a scan
        only when some future was cancelled since the last one: this runs on every step)."""
        if not self._cancelled:
            return 0
        self._cancelled = 0
        live = [future for future in self._queue if not future.cancelled()]
        dropped = len(self._queue) - len(live)
        if dropped:
            self._queue = collections.deque(live)
        return dropped

    def fail_all(self, error: BaseException) -> int:
        """Fail every page still waiting; returns how many there were."""
        failed = 0
        while self._queue:
            future = self._queue.popleft()
            if not future.done():
                future.set_exception(error)
                failed += 1
        return failed


class GatePermit:
    """The gate's permit: records the outcome, and tells the gate when the request leaves."""

    __slots__ = ("_on_sent", "outcome")

    def __init__(self, on_sent: Callable[[], None]) -> None:
        self.outcome: Outcome | None = None
        self._on_sent: Callable[[], None] | None = on_sent

    def finish(self, outcome: Outcome) -> None:
        self.outcome = outcome

    def sent(self) -> None:
        if self._on_sent is not None:
            on_sent, self._on_sent = self._on_sent, None
            on_sent()
