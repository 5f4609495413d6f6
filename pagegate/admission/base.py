"""The seam between page work and whatever decides how much of it reaches the server.

A page worker holds a `Permit` for exactly the time one request is in flight:

    async with admission.slot(group_id) as permit:
        png = render(...)              # only after admission: memory stays flat
        permit.sent()                  # the request leaves now (rendering is over)
        reply = await post(...)
        permit.finish(Outcome.OK)

The permit always comes back: on a normal exit, an exception or a cancellation.
If the worker did not call `finish`, leaving the block normally counts as `OK`,
leaving it with `CapacityError` counts as `CAPACITY`, with any other exception as
`CONTENT`, and cancellation or a closed gate (`GateClosedError`) as `CANCELLED`.

Outcomes feed the limiter the way Netflix concurrency-limits' listener does
(onSuccess / onDropped / onIgnore): OK and CONTENT are pages the server finished
(progress); CAPACITY is a sign of overload; CANCELLED carries no signal.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pagegate.errors import CapacityError, GateClosedError


class Outcome(enum.Enum):
    OK = "ok"                 # the server answered and the answer was usable
    CONTENT = "content"       # the server answered, but the answer was unusable
    CAPACITY = "capacity"     # 503/429/refused/reset/timeout: the server could not take it
    CANCELLED = "cancelled"   # the caller gave up; no information about the server

    @property
    def server_finished(self) -> bool:
        """True when the server completed work for this request (counts as progress)."""
        return self in (Outcome.OK, Outcome.CONTENT)


class Permit(Protocol):
    def finish(self, outcome: Outcome) -> None:
        """Report how the request ended (otherwise the way the block ends decides)."""

    def sent(self) -> None:
        """Mark the moment the request goes on the wire (work before it is client-side).

        An admission that watches the server's front end (the gate's frontend gap)
        counts the page as the server's only from here. Calling it twice is harmless.
        """


@dataclass(frozen=True, slots=True)
class AdmissionSignals:
    """What another admission (a router) needs to know of one, whatever kind it is."""

    in_flight: int                     # pages holding a permit
    queued: int                        # pages waiting for one
    limit: int | None                  # pages it lets in flight now (C, a cap); None: no limit
    paused: str | None = None          # why it admits nothing now; None while it admits
    reading_at: float | None = None    # time of its newest server reading; None: it reads none


class Admission(Protocol):
    """Anything that hands out page permits: a fixed limit, the gate, a router."""

    def slot(self, group_id: str) -> AbstractAsyncContextManager[Permit]: ...

    def signals(self, now: float) -> AdmissionSignals:
        """Its state at `now` (on the caller's clock), as a router sees it."""
        ...

    def snapshot(self) -> dict[str, Any]: ...


def outcome_for_exception(exc: BaseException | None) -> Outcome:
    """The outcome to record when a permit is returned without an explicit `finish`."""
    if exc is None:
        return Outcome.OK
    if isinstance(exc, (asyncio.CancelledError, GateClosedError)):
        return Outcome.CANCELLED  # nothing learned about the server
    if isinstance(exc, CapacityError):
        return Outcome.CAPACITY
    return Outcome.CONTENT


class ReportsOutcome(Protocol):
    @property
    def outcome(self) -> Outcome | None: ...


PermitT = TypeVar("PermitT", bound=ReportsOutcome)


@contextmanager
def settled(permit: PermitT, settle: Callable[[Outcome], None]) -> Iterator[PermitT]:
    """Hand out `permit`; however the holder's block ends, call `settle` once with the
    outcome the holder reported, or else the one its exception implies.

    Every admission returns a permit this way, so a cancelled or failed page is
    counted the same by the gate, the router, a fixed limit and the bench's taps.
    """
    error: BaseException | None = None
    try:
        yield permit
    except BaseException as exc:
        error = exc
        raise
    finally:
        settle(permit.outcome or outcome_for_exception(error))


class RecordingPermit:
    """A permit that only remembers what its holder reported (outcome None if none)."""

    __slots__ = ("outcome", "was_sent")

    def __init__(self) -> None:
        self.outcome: Outcome | None = None
        self.was_sent = False

    def finish(self, outcome: Outcome) -> None:
        self.outcome = outcome

    def sent(self) -> None:
        self.was_sent = True


class FixedLimit:
    """At most `limit` requests in flight; no server feedback.

    The `--max-concurrent-requests` bound, and a test double that pins behaviour.
    Must be created inside the event loop that uses it.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self._sem = asyncio.Semaphore(limit)
        self.queued = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        self.outcomes: dict[str, int] = {o.value: 0 for o in Outcome}

    @asynccontextmanager
    async def _slot(self, group_id: str) -> AsyncIterator[Permit]:
        self.queued += 1
        try:
            await self._sem.acquire()
        finally:
            self.queued -= 1
        try:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            with settled(RecordingPermit(), self._settle) as permit:
                yield permit
        finally:
            self._sem.release()

    def _settle(self, outcome: Outcome) -> None:
        self.in_flight -= 1
        self.outcomes[outcome.value] += 1

    def slot(self, group_id: str) -> AbstractAsyncContextManager[Permit]:
        return self._slot(group_id)

    def signals(self, now: float) -> AdmissionSignals:
        return AdmissionSignals(in_flight=self.in_flight, queued=self.queued, limit=self.limit)

    def snapshot(self) -> dict[str, Any]:
        return {
            "kind": "fixed",
            "limit": self.limit,
            "in_flight": self.in_flight,
            "peak_in_flight": self.peak_in_flight,
            "outcomes": dict(self.outcomes),
        }

    def __repr__(self) -> str:
        return f"FixedLimit(limit={self.limit}, in_flight={self.in_flight})"
