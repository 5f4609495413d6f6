"""Which group a run works on next: its own unclaimed ones first, then the groups other
runs hold, each taken over when its holder's heartbeat stands still for a lease.

A run ends when every one of its groups is done by someone: by itself, or by another run
whose release marker carries the group's outcome. A group another run handed back
unfinished (it was stopped) is claimed again and done here.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pagegate.claims.board import Beat, Claim
from pagegate.claims.holder import Holder
from pagegate.errors import StorageError, WriteRefusedError
from pagegate.ocr.halt import Halt
from pagegate.ocr.outcomes import GroupOutcome, Tally, outcome_from_json, outcome_to_json
from pagegate.plan.groups import Group
from pagegate.settle import settle

log = logging.getLogger("pagegate.claims")

RunGroup = Callable[[Group], Awaitable[GroupOutcome]]
OnDone = Callable[..., None]  # (group, *outcomes): one outcome, or this run's and the taker's


@dataclass
class _Watch:
    """A group another run holds, and since when its claim and heartbeat stood still."""

    group: Group
    claim: Claim | None          # None: not read yet (a store error), look again
    mark: tuple[int, int | None] | None = None  # (generation, heartbeat count) last seen
    since: float = 0.0
    ours: GroupOutcome | None = None  # what this run did before it lost the group


def done_by_holder(outcome: GroupOutcome) -> bool:
    """Whether a released group needs nobody else: none of its PDFs stopped or handed over."""
    return outcome.stopped == 0 and not outcome.handed_over


def others_share(theirs: GroupOutcome, ours: GroupOutcome | None, name: str) -> GroupOutcome:
    """The taker's outcome of a group this run lost, less the PDFs this run had committed
    (the taker found them done and skipped them)."""
    if ours is None:
        return replace(theirs, by=name)
    skipped = max(0, theirs.tally.skipped - ours.tally.ok - sum(p.status == "ok" for p in ours.pdfs))
    return replace(theirs, tally=replace(theirs.tally, skipped=skipped), by=name)


def kept_share(ours: GroupOutcome) -> GroupOutcome:
    """What this run did for a group it lost: its commits and records, nothing else."""
    named = tuple(p for p in ours.pdfs if p.status in ("ok", "failed"))
    return GroupOutcome(ours.group_id, named, Tally(ok=ours.tally.ok, pages=ours.tally.pages,
        fallback_pages=ours.tally.fallback_pages, input_tokens=ours.tally.input_tokens,
        output_tokens=ours.tally.output_tokens))


class Turns:
    """Runs `run_group` over `groups`, at most `workers` at once, one run per group."""

    def __init__(self, groups: Sequence[Group], *, workers: int, holder: Holder,
                 run_group: RunGroup, halt: Halt, on_done: OnDone | None = None,
                 fresh_after: float | None = None) -> None:
        self.queue: deque[tuple[Group, Claim | None]] = deque((g, None) for g in groups)
        self.workers = workers
        self.holder = holder
        self.run_group = run_group
        self.halt = halt
        self.on_done = on_done
        self.fresh_after = fresh_after  # the store's time this run began (Board.mark); None: never
        self.watching: dict[str, _Watch] = {}
        self.running: dict[asyncio.Task[GroupOutcome], Group] = {}
        self.outcomes: list[GroupOutcome] = []
        self.others: dict[str, str] = {}  # run -> its name, every other run met
        self.clock = holder.clock
        self._looked_at: float | None = None

    async def run(self) -> list[GroupOutcome]:
        try:
            while self.queue or self.watching or self.running:
                await self._start_what_can_start()
                await self._wait_for_something()
        except asyncio.CancelledError:
            for task in self.running:
                task.cancel()
            await settle(list(self.running))
            for group in self.running.values():  # stopped here: free for others at once
                await asyncio.shield(self._release(group.id, None))
            raise
        return self.outcomes

    async def _start_what_can_start(self) -> None:
        while self.queue and len(self.running) < self.workers:
            group, seen = self.queue.popleft()
            held = await self._claim(group, seen)
            if held is None:
                self.running[asyncio.ensure_future(self.run_group(group))] = group
            elif isinstance(held, GroupOutcome):
                self._done(group, held)
            else:
                self._watch(group, held)

    async def _claim(self, group: Group, seen: Claim | None
                     ) -> Claim | _Unread | GroupOutcome | None:
        """None: the group is ours to run now; an outcome: another run did it since this
        run began; else the claim to watch. `seen`: the claim to take over, else look."""
        if self.halt.error is not None:
            return None  # every PDF stops at once; no claim is needed to say so
        try:
            claim = seen or await self.holder.run_io(self.holder.board.look, group.id)
            if seen is None and claim is not None:
                if claim.released and claim.run != self.holder.run:
                    news = self._news(claim)
                    if news is not None:
                        self.others.setdefault(claim.run, claim.name)
                        return news
                elif not claim.released and claim.run != self.holder.run:
                    return claim
            return await self.holder.claim(group.id, claim)
        except WriteRefusedError as exc:
            self.halt.trip(exc)
            return None
        except StorageError as exc:
            log.warning("cannot claim group %s yet: %s", group.id, exc)
            return _UNREAD

    def _news(self, claim: Claim) -> GroupOutcome | None:
        """The outcome of a group released done since this run began, by another run; None
        for one released before (this run's plan already saw its commits: what is not
        committed is a failure, which a new run retries as it always has)."""
        if claim.outcome is None:
            return None
        outcome = outcome_from_json(claim.outcome)
        if not done_by_holder(outcome):
            return None
        fresh = (self.fresh_after is not None and claim.modified is not None
                 and claim.modified >= self.fresh_after)
        return replace(outcome, by=claim.name) if fresh else None

    def _watch(self, group: Group, held: Claim | _Unread, ours: GroupOutcome | None = None) -> None:
        claim = held if isinstance(held, Claim) else None
        watch = self.watching.get(group.id) or _Watch(group, claim, since=self.clock.now())
        watch.claim = claim
        watch.ours = ours if ours is not None else watch.ours
        self.watching[group.id] = watch

    async def _wait_for_something(self) -> None:
        """Until a group ends, or, while groups are watched, the next look at them."""
        if not self.running and not self.watching:
            return
        waits: set[asyncio.Future[Any]] = set(self.running)
        timer = None
        if self.watching:  # on the run's clock, so a test's virtual time moves it
            timer = asyncio.ensure_future(self.clock.sleep(self.holder.lease.beat_every))
            waits.add(timer)
        try:
            ready, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if timer is not None:
                timer.cancel()
        finished = [task for task in ready if task in self.running]
        for task in finished:
            await self._finished(self.running.pop(task), task.result())
        now = self.clock.now()
        due = self._looked_at is None or now - self._looked_at >= self.holder.lease.beat_every
        if self.watching and due:
            self._looked_at = now
            await self._look_again()

    async def _finished(self, group: Group, outcome: GroupOutcome) -> None:
        if group.id in self.holder.lost:  # taken over while this run was paused
            self._watch(group, _UNREAD, ours=outcome)
            return
        if outcome.handed_over and self.halt.error is None:  # the fence was shut a while
            await self._release(group.id, None)
            self.queue.append((group, None))
            return
        await self._release(group.id, outcome_to_json(outcome) if done_by_holder(outcome) else None)
        self._done(group, outcome)

    async def _release(self, group_id: str, outcome: dict[str, object] | None) -> None:
        if self.halt.error is not None:  # the workspace takes no writes: the claim lapses
            return
        try:
            await self.holder.release(group_id, outcome)
        except WriteRefusedError as exc:
            self.halt.trip(exc)
        except StorageError as exc:  # its lease runs out; another run redoes what is left
            log.warning("could not hand group %s back: %s", group_id, exc)

    def _done(self, group: Group, *outcomes: GroupOutcome) -> None:
        self.outcomes.extend(outcomes)
        if self.on_done is not None:
            self.on_done(group, *outcomes)

    async def _look_again(self) -> None:
        """Look at every watched group: done by its holder, handed back, or free to take."""
        if self.halt.error is not None:  # nothing more is done here; the run is stopping
            for watch in self.watching.values():
                self._done(watch.group, watch.ours or _stopped(watch.group))
            self.watching.clear()
            return
        beats: dict[str, Beat | None] = {}
        for group_id, watch in list(self.watching.items()):
            try:
                claim = await self.holder.run_io(self.holder.board.look, group_id)
                if claim is not None and not claim.released and claim.run != self.holder.run \
                        and claim.run not in beats:
                    beats[claim.run] = await self.holder.run_io(self.holder.board.beat_of, claim.run)
            except StorageError as exc:
                log.warning("cannot look at group %s: %s", group_id, exc)
                continue
            self._judge(watch, claim, beats)

    def _judge(self, watch: _Watch, claim: Claim | None, beats: dict[str, Beat | None]) -> None:
        group = watch.group
        if claim is None or claim.run == self.holder.run:
            self._take(watch, claim)
            return
        self.others.setdefault(claim.run, claim.name)
        if claim.released:
            outcome = outcome_from_json(claim.outcome) if claim.outcome else None
            if outcome is not None and done_by_holder(outcome):
                del self.watching[group.id]
                theirs = others_share(outcome, watch.ours, claim.name)
                if watch.ours is not None:
                    self._done(group, kept_share(watch.ours), theirs)
                else:
                    self._done(group, theirs)
            else:
                self._take(watch, claim)
            return
        beat = beats.get(claim.run)
        mark = (claim.generation, beat.count if beat else None)
        now = self.clock.now()
        if mark != watch.mark:
            watch.mark, watch.since = mark, now
        if (beat is not None and beat.ended) or self.holder.lease.expired(now, watch.since):
            log.info("taking over group %s from run %s", group.id, claim.name)
            self._take(watch, claim)

    def _take(self, watch: _Watch, claim: Claim | None) -> None:
        """Back to the front of the queue, to claim it (again) and do what is left."""
        del self.watching[watch.group.id]
        if watch.ours is not None:  # what this run did before stays counted as its own
            self.outcomes.append(kept_share(watch.ours))
        self.queue.appendleft((watch.group, claim))


class _Unread:
    """A claim that could not be read (a store error): look again next time."""


_UNREAD = _Unread()


def _stopped(group: Group) -> GroupOutcome:
    return GroupOutcome(group.id, (), Tally(stopped=len(group)))
