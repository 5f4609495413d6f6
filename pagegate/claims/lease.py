"""The lease rules, pure: when a holder may still write, and when a claim is free to take.

Every judgement is made on the judge's own monotonic clock; no two machines compare
clock readings. What they share is the rate of time: a holder counts from the moment
it *sent* its last heartbeat that landed, a taker from the moment it first *saw* that
heartbeat, which came later. So when the holder's writes stop at `write_window` after
its mark, the taker's wait of `seconds` after its own mark leaves `beat_every` for the
holder's last write to land before anyone else writes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lease:
    """A lease of `seconds`, with a heartbeat each quarter of it."""

    seconds: float = 60.0

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ValueError("the claim lease must be positive")

    @property
    def beat_every(self) -> float:
        """How often the holder writes its heartbeat (and a waiting run looks again)."""
        return self.seconds / 4

    @property
    def write_window(self) -> float:
        """How long after its last landed heartbeat was sent the holder may still write:
        two heartbeats may fail in a row (a slow store) before its writes stop."""
        return self.seconds - self.beat_every

    def may_write(self, now: float, beat_sent_at: float | None) -> bool:
        return beat_sent_at is not None and now - beat_sent_at < self.write_window

    def stalled(self, sent_at: float, last_sent_at: float | None) -> bool:
        """A heartbeat that lands after a gap this long follows a pause (SIGSTOP, a frozen
        VM, a store that refused heartbeats): others may have taken the claims over."""
        return last_sent_at is not None and sent_at - last_sent_at >= self.write_window

    def expired(self, now: float, unchanged_since: float) -> bool:
        """The holder's heartbeat has stood still for a whole lease: the holder is gone."""
        return now - unchanged_since >= self.seconds
