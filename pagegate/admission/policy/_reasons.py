"""Why a release happened or was held back, and why page dispatch is paused."""

from __future__ import annotations

import enum
from dataclasses import dataclass


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
