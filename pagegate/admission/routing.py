"""The router's pure rules: which server a page queues for, and who is in rotation.

A server leaves rotation when its admission pauses or when `refuse_limit` requests in a
row come back as capacity errors; it comes back once it shows it is there again (a
reading newer than the refusal, or, without readings, a probation). Among the servers in
rotation, a page goes to the least loaded: pages assigned per unit of its limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pagegate.admission.base import Outcome


@dataclass(frozen=True, slots=True)
class ServerLoad:
    """What the choice looks at: is the server in rotation, and how full is it."""

    in_rotation: bool
    assigned: int   # pages the router has waiting at or in flight on this server
    capacity: int   # the server's current concurrency limit (at least 1)


def choose_server(loads: Sequence[ServerLoad]) -> int | None:
    """Index of the least-loaded server in rotation (assigned / capacity), None if none.

    Ties go to the lower index. Ratios are compared by cross-multiplication, so equal
    loads are equal exactly.
    """
    best: int | None = None
    for index, load in enumerate(loads):
        if not load.in_rotation:
            continue
        if best is None:
            best = index
            continue
        chosen = loads[best]
        if load.assigned * max(1, chosen.capacity) < chosen.assigned * max(1, load.capacity):
            best = index
    return best


@dataclass(frozen=True, slots=True)
class ServerHealth:
    """The router's own view of a server: requests refused in a row, and since when out."""

    refusals: int = 0
    refused_at: float | None = None  # set when `refuse_limit` refusals took it out


def after_outcome(
    health: ServerHealth, outcome: Outcome, now: float, refuse_limit: int
) -> ServerHealth:
    """Fold one finished request in: an answer clears refusals, a capacity error adds one."""
    if outcome.server_finished:
        return ServerHealth()
    if outcome is not Outcome.CAPACITY:
        return health
    refusals = health.refusals + 1
    if refusals >= refuse_limit:
        return replace(health, refusals=refusals, refused_at=now)
    return replace(health, refusals=refusals)


def in_rotation(
    health: ServerHealth,
    *,
    paused: bool,
    reading_at: float | None,
    now: float,
    probation_seconds: float,
) -> bool:
    """May pages be sent to the server now?

    Not while its gate is paused. After refusals, only once it has shown it is back: a
    reading newer than the refusal, or (no readings at all) the probation has passed.
    """
    if paused:
        return False
    if health.refused_at is None:
        return True
    if reading_at is not None and reading_at > health.refused_at:
        return True
    return now - health.refused_at >= probation_seconds
