"""How many restarts the watchdog may still make: a token bucket that refills over time.

olmOCR stops after 5 restarts in a job's lifetime (MAX_RETRIES, never reset;
`vllm_server_host` in allenai/olmocr `olmocr/pipeline.py`), so a week-long job dies of
five unrelated crashes. Here a crash loop is still cut off (the bucket empties) but a
server that has run cleanly for a while earns its restarts back: one token every
`refill_seconds`, up to `capacity`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class RestartBudget:
    capacity: int = 5
    refill_seconds: float = 600.0
    tokens: float = 5.0
    updated_at: float = 0.0

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError("capacity must be at least 1")
        if self.refill_seconds <= 0:
            raise ValueError("refill_seconds must be positive")
        if not 0 <= self.tokens <= self.capacity:
            raise ValueError("tokens must be within 0..capacity")

    @classmethod
    def full(cls, capacity: int, refill_seconds: float, now: float) -> RestartBudget:
        return cls(capacity, refill_seconds, float(capacity), now)

    def at(self, now: float) -> RestartBudget:
        """The bucket as it stands at `now` (time never runs backwards here)."""
        elapsed = max(0.0, now - self.updated_at)
        tokens = min(float(self.capacity), self.tokens + elapsed / self.refill_seconds)
        return replace(self, tokens=tokens, updated_at=max(now, self.updated_at))

    def take(self, now: float) -> tuple[bool, RestartBudget]:
        """Spend one restart if a whole one is available: (allowed?, the new bucket)."""
        current = self.at(now)
        if current.tokens < 1.0:
            return False, current
        return True, replace(current, tokens=current.tokens - 1.0)

    def seconds_until_next(self, now: float) -> float:
        """How long until a restart is allowed (0 when one is available now)."""
        current = self.at(now)
        return max(0.0, (1.0 - current.tokens) * self.refill_seconds)
