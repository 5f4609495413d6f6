"""Backoff delays for capacity errors: pure, so the schedule is testable without sleeping.

The delay doubles from `base` to `cap` and is then spread by jitter: thousands of pages
that lost their server at the same instant must not come back at the same instant
(AWS Architecture Blog, "Exponential Backoff And Jitter": "equal jitter" keeps half the
delay and draws the other half at random). The random draw is passed in, so the
function stays pure and a test can pin it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackoffPolicy:
    """How long pages wait between capacity errors.

    The cap is short on purpose: an overloaded or restarting server should get its work
    back within seconds of recovering, and the admission gate (not this delay) is what
    keeps the load off it. The count of failures is not limited at all: only the run's
    `server_unavailable_after_seconds` ends the waiting (olmOCR exits the whole job
    after 10 connection backoffs: MAX_BACKOFF_ATTEMPTS and `sys.exit(1)` in
    allenai/olmocr `olmocr/pipeline.py`).
    """

    base: float = 1.0
    cap: float = 30.0
    jitter: float = 0.5  # share of the delay drawn at random (0: none, 1: "full jitter")

    def __post_init__(self) -> None:
        if self.base <= 0 or self.cap < self.base:
            raise ValueError("backoff needs 0 < base <= cap")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("jitter must be within [0, 1]")

    def delay(self, failures: int, draw: float) -> float:
        """Seconds to wait after the `failures`-th consecutive error; `draw` is in [0, 1)."""
        return capacity_backoff(failures, base=self.base, cap=self.cap, jitter=self.jitter,
                                draw=draw)


def capacity_backoff(
    failures: int,
    *,
    base: float = 1.0,
    cap: float = 30.0,
    jitter: float = 0.0,
    draw: float = 0.0,
) -> float:
    """Seconds to wait after the `failures`-th consecutive capacity error (1-based).

    The ceiling `min(cap, base * 2**(failures-1))` is never exceeded; with jitter j the
    delay lies in [ceiling * (1 - j), ceiling], placed by `draw` in [0, 1).
    """
    if failures < 1:
        return 0.0
    ceiling = min(cap, base * 2.0 ** min(failures - 1, 64))
    return float(ceiling * (1.0 - jitter * (1.0 - draw)))
