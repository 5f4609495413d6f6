"""Claims on groups (pagegate.claims): the lease rules as a table, the claim objects on
both backends, and several runs over one workspace in virtual time.

The runs here are the real `Holder` and `Turns` over a real local store, in one
looptime event loop: store calls run inline, so they take no virtual time, and a lease
of 60 s passes in a moment. A group's "work" is a sleep followed by a commit through
the holder's fence, which records which run committed it.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from pagegate.claims.board import Board, claim_key
from pagegate.claims.holder import Holder, open_holder
from pagegate.claims.lease import Lease
from pagegate.clock import LoopClock
from pagegate.errors import ClaimLostError, StorageError
from pagegate.io.local import LocalStore
from pagegate.io.s3 import S3Store
from pagegate.io.store import Store
from pagegate.ocr.halt import Halt
from pagegate.ocr.outcomes import GroupOutcome, PdfOutcome, RunTotals, Tally, outcome_to_json
from pagegate.ocr.turns import Turns
from pagegate.plan.groups import Group
from pagegate.sim.virtual import RESOLUTION_S, VirtualLoop

LEASE = Lease(60.0)
WORK_S = 10.0  # virtual seconds one group takes


# ------------------------------------------------------------------------ the lease rules


@pytest.mark.parametrize(("now", "sent_at", "may"), [
    (100.0, None, False),   # no heartbeat has landed yet
    (100.0, 100.0, True),
    (144.9, 100.0, True),   # inside the write window (60 - 15 s)
    (145.0, 100.0, False),  # its end: 15 s before any taker may act
])
def test_a_holder_writes_only_inside_its_write_window(
    now: float, sent_at: float | None, may: bool
) -> None:
    assert LEASE.may_write(now, sent_at) is may


@pytest.mark.parametrize(("sent_at", "last", "stalled"), [
    (115.0, 100.0, False),  # on time
    (144.9, 100.0, False),  # one heartbeat lost
    (145.0, 100.0, True),   # a gap of a write window: others may have taken over
    (100.0, None, False),   # the first heartbeat
])
def test_a_heartbeat_after_a_long_gap_is_a_stall(
    sent_at: float, last: float | None, stalled: bool
) -> None:
    assert LEASE.stalled(sent_at, last) is stalled


@pytest.mark.parametrize(("now", "since", "expired"), [
    (159.9, 100.0, False),
    (160.0, 100.0, True),
])
def test_a_claim_expires_after_a_whole_lease_of_stillness(
    now: float, since: float, expired: bool
) -> None:
    assert LEASE.expired(now, since) is expired


def test_the_lease_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Lease(0.0)


# ------------------------------------------------------------- the claim objects, both backends


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "local":
        return LocalStore(tmp_path / "ws")
    return S3Store(request.getfixturevalue("s3_bucket"), "ws",
                   client=request.getfixturevalue("s3_client"))


def test_each_generation_of_a_claim_is_made_by_exactly_one_run(store: Store) -> None:
    a, b = Board(store, "run-a"), Board(store, "run-b")
    assert a.look("g1") is None
    assert a.take("g1", None) == 0
    assert b.take("g1", None) is None  # a made generation 0 first
    claim = b.look("g1")
    assert claim is not None and (claim.generation, claim.run, claim.released) == (0, "run-a", False)
    assert b.take("g1", 0) == 1  # a takeover: the next generation
    assert not a.release("g1", 0, {"done": True})  # a lost it: its release makes nothing
    assert b.release("g1", 1, {"done": True})
    claim = a.look("g1")
    assert claim is not None and (claim.generation, claim.run, claim.released) == (2, "run-b", True)
    assert claim.outcome == {"done": True}
    assert store.exists(claim_key("g1", 0))  # generations are never deleted


def test_a_heartbeat_reads_back_with_its_count_and_end(store: Store) -> None:
    a, b = Board(store, "run-a", name="brave-fox"), Board(store, "run-b")
    assert b.beat_of("run-a") is None
    a.beat(3)
    beat = b.beat_of("run-a")
    assert beat is not None and (beat.count, beat.ended, beat.name) == (3, False, "brave-fox")
    a.beat(4, ended=True)
    beat = b.beat_of("run-a")
    assert beat is not None and beat.ended


# ------------------------------------------------------------------ runs in virtual time


async def inline(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Store calls in the loop itself: they take no virtual time."""
    return fn(*args, **kwargs)


def in_virtual_time(main: Callable[[], Awaitable[Any]]) -> Any:
    loop = VirtualLoop(start=0.0, noop_cycles=1, resolution=RESOLUTION_S)
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


class Commits:
    """Who committed each group, and the commits the fence refused."""

    def __init__(self) -> None:
        self.by: dict[str, list[str]] = defaultdict(list)
        self.refused: list[tuple[str, str]] = []

    def worker(self, holder: Holder, *, work_s: float = WORK_S,
               stall: Callable[[str], Awaitable[None]] | None = None,
               ) -> Callable[[Group], Awaitable[GroupOutcome]]:
        async def run_group(group: Group) -> GroupOutcome:
            await holder.clock.sleep(work_s)
            if stall is not None:
                await stall(group.id)
            try:
                await holder.ready(group.id)
                holder.fence(group.id)
            except ClaimLostError:
                self.refused.append((holder.run, group.id))
                return GroupOutcome(group.id, (PdfOutcome(group.uris[0], "handed_over"),))
            self.by[group.id].append(holder.run)
            return GroupOutcome(group.id, (), Tally(ok=1, pages=1))
        return run_group


def groups(n: int) -> list[Group]:
    return [Group(f"g{i:03d}", (f"/in/d{i:03d}.pdf",), 1) for i in range(n)]


async def one_run(store: Store, run: str, plan: list[Group], commits: Commits, *,
                  workers: int = 2, start_s: float = 0.0) -> tuple[list[GroupOutcome], Turns]:
    clock = LoopClock()
    await clock.sleep(start_s)
    board = Board(store, run)
    mark = board.mark()  # what is released from now on is news to this run
    async with open_holder(board, LEASE, clock, run_io=inline) as holder:
        turns = Turns(plan, workers=workers, holder=holder, run_group=commits.worker(holder),
                      halt=Halt(), fresh_after=mark)
        return await turns.run(), turns


def test_three_runs_split_the_groups_and_each_reports_all_of_them(tmp_path: Path) -> None:
    store, commits, plan = LocalStore(tmp_path), Commits(), groups(30)

    async def main() -> list[tuple[list[GroupOutcome], Turns]]:
        return await asyncio.gather(*(one_run(store, f"run-{i}", plan, commits, start_s=i)
                                      for i in range(3)))

    runs = in_virtual_time(main)
    assert sorted(commits.by) == [g.id for g in plan]
    assert all(len(who) == 1 for who in commits.by.values())  # every group once
    mine = [sum(1 for who in commits.by.values() if who == [f"run-{i}"]) for i in range(3)]
    assert min(mine) >= 8, mine  # the work is split, not done by the first run alone
    for i, (outcomes, turns) in enumerate(runs):
        totals = RunTotals.of(outcomes)
        assert totals.pdfs_ok == 30  # each run speaks for the whole workspace
        assert totals.this_run_ok == mine[i]
        assert set(turns.others) == {f"run-{j}" for j in range(3) if j != i}


class DyingBoard(Board):
    """A run that dies at `dies_at` (virtual s): no heartbeat or claim after that."""

    def __init__(self, store: Store, run: str, dies_at: float) -> None:
        super().__init__(store, run)
        self.dies_at = dies_at

    def _dead(self) -> bool:
        return asyncio.get_running_loop().time() >= self.dies_at

    def beat(self, count: int, *, ended: bool = False) -> None:
        if self._dead():
            raise StorageError("dead")
        super().beat(count, ended=ended)

    def release(self, group_id: str, generation: int, outcome: dict[str, Any] | None) -> bool:
        if self._dead():
            raise StorageError("dead")
        return super().release(group_id, generation, outcome)


def test_the_groups_of_a_run_that_died_are_taken_over_after_the_lease(tmp_path: Path) -> None:
    store, commits, plan = LocalStore(tmp_path), Commits(), groups(12)
    died_at = 15.0  # holding its second pair of groups, their work half done
    taken: dict[str, float] = {}
    ended: list[float] = []

    async def dead_run() -> None:
        clock = LoopClock()
        holder = Holder(DyingBoard(store, "dead", died_at), LEASE, clock, run_io=inline)
        await holder.beat()
        loop = asyncio.ensure_future(holder.beat_forever())

        async def never_back(group: Group) -> GroupOutcome:
            if clock.now() >= died_at - WORK_S:
                await asyncio.Event().wait()  # it died with this group in hand
            return await commits.worker(holder)(group)

        turns = Turns(plan, workers=2, holder=holder, run_group=never_back, halt=Halt())
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(turns.run(), timeout=400)
        loop.cancel()

    async def live_run() -> list[GroupOutcome]:
        outcomes, _ = await one_run(store, "live", plan, commits, start_s=1.0)
        return outcomes

    async def main() -> list[GroupOutcome]:
        dead = asyncio.ensure_future(dead_run())
        outcomes = await live_run()
        ended.append(asyncio.get_running_loop().time())
        for group_id in commits.by:
            claim = Board(store, "x").look(group_id)
            assert claim is not None
            taken[group_id] = claim.generation
        await dead
        return outcomes

    outcomes = in_virtual_time(main)
    assert sorted(commits.by) == [g.id for g in plan]
    assert all(len(who) == 1 for who in commits.by.values())
    dead_groups = [gid for gid, who in commits.by.items() if who == ["dead"]]
    assert dead_groups == ["g000", "g001"]  # its first two, committed before it died
    assert RunTotals.of(outcomes).pdfs_ok == 12
    # Two groups were the dead run's when it died (its second pair; the live run had
    # claimed g002 and g003 at 1 s): the live run made a takeover generation (1) before
    # releasing them (2); the others it claimed fresh (0 -> 1).
    assert sorted(gid for gid, gen in taken.items() if gen == 2) == ["g004", "g005"]
    # Not before a whole lease of stillness: the dead run's last heartbeat was at 0 s,
    # first seen by the live run at 1 s; then 10 s of work on the taken groups.
    assert ended[0] >= 1.0 + LEASE.seconds + WORK_S


class PausingBoard(Board):
    """A run whose heartbeats do not land between `pause` and `resume` (virtual s)."""

    def __init__(self, store: Store, run: str, pause: float, resume: float) -> None:
        super().__init__(store, run)
        self.window = (pause, resume)

    def beat(self, count: int, *, ended: bool = False) -> None:
        now = asyncio.get_running_loop().time()
        if self.window[0] <= now < self.window[1]:
            raise StorageError("paused")
        super().beat(count, ended=ended)


def test_a_run_paused_past_its_lease_commits_nothing_for_the_groups_it_lost(
    tmp_path: Path,
) -> None:
    """The paused run's first groups take 50 s, which ends inside its pause and past its
    write window (45 s after its last heartbeat, at 0 s): its commits wait at the fence.
    The live run takes those groups over at 61 s and commits them; once the paused run's
    heartbeat lands again (185 s) it finds them taken and writes nothing for them."""
    store, commits, plan = LocalStore(tmp_path), Commits(), groups(6)
    pause, resume = 5.0, 5.0 + 3 * LEASE.seconds

    async def paused_run() -> tuple[list[GroupOutcome], Turns]:
        clock = LoopClock()
        board = PausingBoard(store, "paused", pause, resume)
        mark = board.mark()
        async with open_holder(board, LEASE, clock, run_io=inline) as holder:
            turns = Turns(plan, workers=2, holder=holder,
                          run_group=commits.worker(holder, work_s=50.0), halt=Halt(),
                          fresh_after=mark)
            return await turns.run(), turns

    async def main() -> Any:
        return await asyncio.gather(paused_run(), one_run(store, "live", plan, commits,
                                                          start_s=1.0))

    (paused_outcomes, _), (live_outcomes, _) = in_virtual_time(main)
    assert all(len(who) == 1 for who in commits.by.values())
    assert sorted(commits.by) == [g.id for g in plan]
    assert sorted(commits.refused) == [("paused", "g000"), ("paused", "g001")]
    assert commits.by["g000"] == commits.by["g001"] == ["live"]
    assert RunTotals.of(paused_outcomes).pdfs_ok == RunTotals.of(live_outcomes).pdfs_ok == 6
    assert RunTotals.of(paused_outcomes).this_run_ok == 0


def test_a_group_released_before_this_run_began_is_history_and_one_released_since_is_news(
    tmp_path: Path,
) -> None:
    """A group another run finished before this run planned, with a PDF that failed, is
    done again here (its failure retried, as every new run retries them); one finished
    since this run planned is that run's answer, and nothing is redone."""
    store, commits = LocalStore(tmp_path), Commits()
    old, new = groups(2)
    other = Board(store, "other", name="calm-owl")
    failed = GroupOutcome(old.id, (PdfOutcome(old.uris[0], "failed", reason="corrupt"),))
    for group in (old, new):
        other.take(group.id, None)
        other.release(group.id, 0, outcome_to_json(failed if group is old else
                                                   GroupOutcome(group.id, (), Tally(ok=1))))
    an_hour_ago = time.time() - 3600
    os.utime(store.uri_for(claim_key(old.id, 1)), (an_hour_ago, an_hour_ago))
    mark = Board(store, "late").mark()
    assert mark is not None
    os.utime(store.uri_for(claim_key(new.id, 1)), (mark + 1, mark + 1))

    async def main() -> list[GroupOutcome]:
        clock = LoopClock()
        async with open_holder(Board(store, "late"), LEASE, clock, run_io=inline) as holder:
            turns = Turns([old, new], workers=2, holder=holder,
                          run_group=commits.worker(holder), halt=Halt(), fresh_after=mark)
            return await turns.run()

    outcomes = in_virtual_time(main)
    assert dict(commits.by) == {old.id: ["late"]}
    by = {o.group_id: o.by for o in outcomes}
    assert by == {old.id: None, new.id: "calm-owl"}
