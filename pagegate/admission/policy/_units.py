"""Units of page credits: the four user rules that govern releases, a unit's size, and the
reasons a release is held (which also say why page dispatch pauses).

A release grants one unit of credits; waiting pages spend them oldest unit first, and a
page the server did not finish returns its credit to its unit, so a retry can take it.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

from pagegate.admission.policy._config import GateConfig


class Reason(enum.StrEnum):
    RELEASED = "released"
    NO_READING = "no_reading"          # no scrape has answered yet
    SCRAPE_FAILED = "scrape_failed"    # the latest scrape failed (a missing reading)
    STALE = "stale"                    # the newest reading is older than stale_after
    UNHEALTHY = "unhealthy"            # the server reported itself unfit
    STALLED = "stalled"                # work on the server, no token generated for a while
    NO_DEMAND = "no_demand"            # every waiting page already has a credit
    CREDITS_LEFT = "credits_left"      # the last unit is not used up yet
    COOLDOWN = "cooldown"              # rule 3
    PROGRESS = "progress"              # rule 4
    PEAK_RATIO = "peak_ratio"          # rule 2


@dataclass(frozen=True, slots=True)
class ReleaseDecision:
    """Release `pages` credits, or hold for `reason`; `recheck_at`: when time alone may
    change the answer (the end of a cooldown)."""

    release: bool
    pages: int
    reason: Reason
    recheck_at: float | None = None


def hold(reason: Reason, recheck_at: float | None = None) -> ReleaseDecision:
    return ReleaseDecision(False, 0, reason, recheck_at)


@dataclass(frozen=True, slots=True)
class Units:
    credits: tuple[tuple[int, int], ...] = ()    # (unit id, unspent credits), oldest first
    units_released: int = 0                      # also the id of the newest unit
    last_release_at: float | None = None
    unit_completed: int = 0                      # completed pages of the newest unit

    @property
    def open_credits(self) -> int:
        return sum(n for _, n in self.credits)


def spend(units: Units) -> tuple[Units, int]:
    """A page goes in flight on the oldest unit's credit; returns that unit's id."""
    (unit_id, left), *rest = units.credits
    credits = tuple(rest) if left == 1 else ((unit_id, left - 1), *rest)
    return replace(units, credits=credits), unit_id


def give_back(units: Units, unit_id: int) -> Units:
    """A page the server did not finish returns its credit to its unit."""
    pool = dict(units.credits)
    pool[unit_id] = pool.get(unit_id, 0) + 1
    return replace(units, credits=tuple(sorted(pool.items())))


def completed(units: Units, unit_id: int) -> Units:
    """A page the server finished: progress, if it belongs to the newest unit."""
    return replace(units, unit_completed=units.unit_completed + (unit_id == units.units_released))


def release_rules(
    units: Units, *, queued: int, room: int, waiting: int, peak: float, now: float,
    config: GateConfig,
) -> ReleaseDecision | None:
    """The first rule that holds a release back, or None when a unit may go now.

    Beside the four user rules a release needs demand (waiting pages without credit) and
    the last unit used up, unless C has more room than the credits left.
    """
    open_credits = units.open_credits
    if queued <= open_credits:
        return hold(Reason.NO_DEMAND)
    if 0 < open_credits >= room:
        return hold(Reason.CREDITS_LEFT)
    if units.last_release_at is not None:
        ready_at = units.last_release_at + config.cooldown_seconds
        if now < ready_at:
            return hold(Reason.COOLDOWN, ready_at)
        if config.require_progress and units.unit_completed == 0:
            return hold(Reason.PROGRESS)
    if waiting > config.peak_ratio * peak:
        return hold(Reason.PEAK_RATIO)
    return None


def grant(units: Units, pages: int, now: float) -> Units:
    """Release a unit of `pages` credits now."""
    unit_id = units.units_released + 1
    return Units((*units.credits, (unit_id, pages)), unit_id, now, 0)


def size(drain: float, config: GateConfig) -> int:
    """Pages in a unit: max(unit_pages, ceil(2 x drain x cooldown)), `drain` in pages/s."""
    return max(config.unit_pages, math.ceil(2.0 * drain * config.cooldown_seconds))
