"""Units of page credits: the four user rules that govern releases, and how big a unit is.

A release grants one unit of credits; waiting pages take them in FIFO order whatever
group they belong to, so a unit may span small groups. A credit is spent when its page
goes in flight; a page the server did not finish (CAPACITY, CANCELLED) returns its credit
to its unit, so a retry can take it.

The four user rules (olmOCR's):
  1. serialized: one decision at a time and at most one unit per decision (the runtime
     has one decision loop), never two releases within one cooldown;
  2. peak ratio: no release while the server's waiting count is above peak_ratio x peak;
  3. cooldown: at least cooldown_seconds between releases; the first release comes as
     soon as the server is ready and idle;
  4. progress: no release until a page of the previous unit has completed.
A release also needs demand (waiting pages without credit) and the last unit nearly used
up, unless the page level has more room than the credits left.

A unit covers the page level's room (C minus what is in flight or credited) plus service
at the estimated rate until the next release can come, with a margin: one cooldown,
plus the recent *dry gap* (how long pages sat at the gate without credits before a
release, since the ratio and progress rules can hold a release past the cooldown). A
unit that ran dry while the server had room grows the next one by a factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from pagegate.admission.policy.config import GateConfig
from pagegate.admission.policy.reasons import Reason, ReleaseDecision, hold


@dataclass(frozen=True, slots=True)
class Units:
    credits: tuple[tuple[int, int], ...] = ()    # (unit id, unspent credits), oldest first
    units_released: int = 0                      # also the id of the newest unit
    last_release_at: float | None = None
    last_unit_pages: int = 0
    unit_completed: int = 0                      # completed pages of the newest unit
    starved: bool = False                        # ran dry while the server had room
    dry_since: float | None = None               # credits ran out with pages queued
    dry_seconds: float = 0.0                     # decayed max of dry gaps before releases

    @property
    def open_credits(self) -> int:
        return sum(n for _, n in self.credits)


# ---------------------------------------------------------------------------- credits


def spend(units: Units) -> tuple[Units, int]:
    """A page goes in flight on the oldest unit's credit; returns that unit's id."""
    (unit_id, left), *rest = units.credits
    credits = tuple(rest) if left == 1 else ((unit_id, left - 1), *rest)
    return replace(units, credits=credits), unit_id


def give_back(units: Units, unit_id: int) -> Units:
    """A page the server did not finish returns its credit to its unit."""
    pool = dict(units.credits)
    pool[unit_id] = pool.get(unit_id, 0) + 1
    return replace(units, credits=tuple(sorted(pool.items())), dry_since=None)


def completed(units: Units, unit_id: int) -> Units:
    """A page the server finished: progress, if it belongs to the newest unit."""
    return replace(units, unit_completed=units.unit_completed + (unit_id == units.units_released))


def mark_dry(units: Units, queued: int, now: float) -> Units:
    """Start (or stop) the clock of pages queued at the gate with no credit to take."""
    dry = queued > 0 and units.open_credits == 0
    if dry and units.dry_since is None:
        return replace(units, dry_since=now)
    if not dry and units.dry_since is not None:
        return replace(units, dry_since=None)
    return units


def after_reading(units: Units, queued: int, *, server_has_room: bool, now: float) -> Units:
    """A usable reading: note a unit that ran dry while the server had room."""
    if queued > 0 and units.open_credits == 0 and server_has_room:
        units = replace(units, starved=True)
    return mark_dry(units, queued, now)


def nobody_waits(units: Units) -> Units:
    return replace(units, dry_since=None)


# ---------------------------------------------------------------------------- releases


def release_rules(
    units: Units,
    *,
    queued: int,
    room: int,
    waiting: int,
    peak: float,
    now: float,
    config: GateConfig,
) -> ReleaseDecision | None:
    """The first rule that holds a release back, or None when a unit may go now.

    `room` is what C and the cap still let in flight; `waiting` and `peak` come from a
    good, fresh reading (the readings' own conditions are checked before).
    """
    open_credits = units.open_credits
    if queued <= open_credits:
        return hold(Reason.NO_DEMAND)
    nearly_used = open_credits <= config.tuning.refill_fraction * units.last_unit_pages
    if not nearly_used and open_credits >= room:
        return hold(Reason.CREDITS_LEFT)  # and the page level could not use more now
    if units.last_release_at is not None:
        ready_at = units.last_release_at + config.cooldown_seconds
        if now < ready_at:
            return hold(Reason.COOLDOWN, ready_at)
        if config.require_progress and units.unit_completed == 0:
            return hold(Reason.PROGRESS)
    if waiting > config.peak_ratio * peak:
        return hold(Reason.PEAK_RATIO)
    return None


def grant(units: Units, pages: int, now: float, config: GateConfig) -> Units:
    """Release a unit of `pages` credits now."""
    unit_id = units.units_released + 1
    return replace(
        units,
        credits=(*units.credits, (unit_id, pages)),
        units_released=unit_id,
        last_release_at=now,
        last_unit_pages=pages,
        unit_completed=0,
        starved=False,
        dry_since=None,
        dry_seconds=dry_gap(units, now, config),
    )


# ---------------------------------------------------------------------------- sizing


def uncovered_room(units: Units, room: int) -> int:
    """Pages the page level could put in flight now that no credit covers yet."""
    return max(0, room - units.open_credits)


def dry_gap(units: Units, now: float, config: GateConfig) -> float:
    """The dry gap to size the next units for: the newest one, or the last estimate decayed.

    Decaying per release forgets a gap that no longer happens within a few units. The
    gap counts at most one cooldown, so an outage (the gate paused for minutes with pages
    queued) does not turn into one enormous unit after it. Before the first release
    nothing ran dry: the gate had not started.
    """
    if units.dry_since is None or units.last_release_at is None:
        gap = 0.0
    else:
        gap = max(0.0, now - units.dry_since)
    decayed = config.tuning.dry_gap_decay * units.dry_seconds
    return min(config.cooldown_seconds, max(gap, decayed))


def size(
    units: Units, rate: float | None, room: int, config: GateConfig, now: float | None = None
) -> int:
    """Pages in the next unit: the uncovered room plus service until the next release.

    `rate` is the service rate (None before any completion: then first_unit_pages, and
    the page level keeps the server safe meanwhile). With `now`, a dry gap still open
    counts at once.
    """
    tuning = config.tuning
    if rate is None:
        pages = config.first_unit_pages
    else:
        dry = units.dry_seconds if now is None else dry_gap(units, now, config)
        interval = config.cooldown_seconds + dry
        pages = math.ceil(uncovered_room(units, room) + rate * interval * tuning.unit_margin)
    if units.starved and units.last_unit_pages > 0:
        pages = max(pages, tuning.starved_unit_factor * units.last_unit_pages)
    return min(tuning.max_unit_pages, max(tuning.min_unit_pages, pages))
