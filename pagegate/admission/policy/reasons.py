"""What a release decision says: release a unit, or which rule held it back."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Reason(enum.StrEnum):
    """Why a release happened or was held back; also why page dispatch is paused."""

    RELEASED = "released"
    NO_READING = "no_reading"          # no scrape has answered yet
    SCRAPE_FAILED = "scrape_failed"    # the latest scrape failed (missing reading)
    STALE = "stale"                    # the newest reading is older than stale_after
    UNHEALTHY = "unhealthy"            # the source reported the server unfit
    STALLED = "stalled"                # work on the server, but no token generated for a while
    NO_DEMAND = "no_demand"            # every waiting page already has a credit
    CREDITS_LEFT = "credits_left"      # the last unit is not used up yet
    COOLDOWN = "cooldown"              # rule 3
    PROGRESS = "progress"              # rule 4
    PEAK_RATIO = "peak_ratio"          # rule 2


@dataclass(frozen=True, slots=True)
class ReleaseDecision:
    """The outcome of one release decision: release `pages` credits, or hold for `reason`.

    `recheck_at` is when the answer can change with time alone (the end of a cooldown);
    None means only a new event (reading, outcome, waiter) can change it.
    """

    release: bool
    pages: int
    reason: Reason
    recheck_at: float | None = None


def hold(reason: Reason, recheck_at: float | None = None) -> ReleaseDecision:
    return ReleaseDecision(False, 0, reason, recheck_at)
