"""Backoff delays for capacity errors: pure, so the schedule is testable without sleeping."""

from __future__ import annotations


def capacity_backoff(failures: int, *, base: float = 1.0, cap: float = 30.0) -> float:
    """Seconds to wait after the `failures`-th consecutive capacity error (1-based).

    Doubles from `base` up to `cap`. The cap is short on purpose: an overloaded or
    restarting server should get its work back within seconds of recovering, and the
    admission gate (not this delay) is what keeps the load off it.
    """
    if failures < 1:
        return 0.0
    return float(min(cap, base * 2 ** (failures - 1)))
