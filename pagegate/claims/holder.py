"""One run's claims while it runs: its heartbeat, the groups it holds, and the fence
that keeps a run which lost a claim from writing for that group.

The heartbeat loop writes heartbeats/<run>.json every quarter lease. A heartbeat that lands
after a gap of a write window or more follows a pause (SIGSTOP, a frozen VM, a store
that refused heartbeats), and another run may have taken claims over meanwhile: the
holder then re-claims each group by making its next generation, which fails exactly
where a taker made it first, and those groups are lost. Until then the fence is shut.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from pagegate.claims.board import Board, Claim
from pagegate.claims.lease import Lease
from pagegate.clock import Clock
from pagegate.errors import ClaimLostError, StorageError, WriteRefusedError

log = logging.getLogger("pagegate.claims")

RunIo = Callable[..., Awaitable[Any]]


class Holder:
    """The groups this run holds, and whether it may still write for each."""

    def __init__(self, board: Board, lease: Lease, clock: Clock,
                 on_refused: Callable[[WriteRefusedError], None] | None = None,
                 run_io: RunIo = asyncio.to_thread) -> None:
        self.board = board
        self.run_io = run_io  # how blocking store calls run: a thread (tests: inline)
        self.on_refused = on_refused  # the workspace stopped taking writes (pagegate.ocr.halt)
        self.lease = lease
        self.clock = clock
        self.generations: dict[str, int] = {}  # group id -> the generation this run made
        self.lost: set[str] = set()
        self._beats = 0
        self._sent_at: float | None = None  # when the last heartbeat that landed was sent

    @property
    def run(self) -> str:
        return self.board.run

    # --- the fence --------------------------------------------------------------------

    def fence(self, group_id: str | None) -> None:
        """Raise ClaimLostError unless this run may write for the group now."""
        if group_id in self.lost:
            raise ClaimLostError(f"group {group_id} was taken over by another run")
        if group_id in self.generations and not self.lease.may_write(self.clock.now(),
                                                                     self._sent_at):
            raise ClaimLostError(f"the claim on group {group_id} may have lapsed")

    def check_lost(self, group_id: str | None) -> None:
        """Raise ClaimLostError if the group is known to be another run's now."""
        if group_id in self.lost:
            raise ClaimLostError(f"group {group_id} was taken over by another run")

    async def ready(self, group_id: str | None) -> None:
        """Wait until the fence is open for the group, or raise ClaimLostError.

        A heartbeat that is late (a slow store) shuts the fence for a while; a commit
        waits for the next heartbeat to settle it rather than throwing its work away.
        """
        while True:
            self.check_lost(group_id)
            if group_id not in self.generations or self.lease.may_write(self.clock.now(),
                                                                        self._sent_at):
                return
            await self.clock.sleep(min(1.0, self.lease.beat_every))

    # --- claims -----------------------------------------------------------------------

    async def claim(self, group_id: str, seen: Claim | None) -> Claim | None:
        """Claim the group as the generation after `seen` (None: the first): None when it
        is this run's now, else the claim of the run that made that generation first."""
        after = seen.generation if seen is not None else None
        generation = await self.run_io(self.board.take, group_id, after)
        if generation is None:
            taken: Claim | None = await self.run_io(self.board.look, group_id)
            if taken is None:
                raise StorageError(f"the claim on group {group_id} cannot be read back")
            return taken
        self.generations[group_id] = generation
        self.lost.discard(group_id)
        return None

    async def release(self, group_id: str, outcome: dict[str, Any] | None) -> None:
        """Hand a held group back, with its outcome when done; a lost one is left alone."""
        generation = self.generations.pop(group_id, None)
        if generation is None or group_id in self.lost:
            return
        if not await self.run_io(self.board.release, group_id, generation, outcome):
            log.warning("group %s was taken over as it was handed back", group_id)

    # --- the heartbeat ----------------------------------------------------------------

    async def beat(self) -> None:
        """Write one heartbeat; after a gap, re-claim every held group first."""
        sent = self.clock.now()
        self._beats += 1
        await self.run_io(self.board.beat, self._beats)
        if self.lease.stalled(sent, self._sent_at):
            await self._reclaim()  # the fence stays shut until this is done
        self._sent_at = sent

    async def _reclaim(self) -> None:
        for group_id, generation in list(self.generations.items()):
            if group_id in self.lost:
                continue
            taken = await self.run_io(self.board.take, group_id, generation)
            if taken is None:
                self.lost.add(group_id)
                log.warning("this run paused past its lease; group %s is another run's now",
                            group_id)
            else:
                self.generations[group_id] = taken

    async def beat_or_warn(self) -> None:
        """A heartbeat; a failed one is told (the fence shuts if they keep failing)."""
        try:
            await self.beat()
        except WriteRefusedError as exc:
            if self.on_refused is not None:
                self.on_refused(exc)
        except StorageError as exc:
            log.warning("heartbeat not written: %s", exc)

    async def beat_forever(self) -> None:
        while True:
            await self.clock.sleep(self.lease.beat_every)
            await self.beat_or_warn()

    async def end(self) -> None:
        """The last heartbeat: this run is gone, its claims (if any are left) free at once."""
        await self.run_io(self.board.beat, self._beats + 1, ended=True)


@asynccontextmanager
async def open_holder(board: Board, lease: Lease, clock: Clock,
                      on_refused: Callable[[WriteRefusedError], None] | None = None,
                      run_io: RunIo = asyncio.to_thread) -> AsyncIterator[Holder]:
    """A holder with its first heartbeat written and its loop running until exit."""
    holder = Holder(board, lease, clock, on_refused, run_io)
    await holder.beat_or_warn()
    loop = asyncio.ensure_future(holder.beat_forever())
    try:
        yield holder
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
        try:
            await asyncio.shield(holder.end())
        except WriteRefusedError:
            pass  # the run says so in its own line; its claims lapse after the lease
        except StorageError as exc:
            log.warning("last heartbeat not written: %s", exc)
