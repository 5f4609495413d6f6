"""The retry plan of one page, as an immutable state machine.

The page worker asks the plan what to send (`current`: attempt number, temperature,
rotation), reports what happened (`on_reply` / `on_content_error`) and gets a new plan
back, until the plan is `done`: either a reply is `accepted`, or the plan is `exhausted`
and the page falls back to the PDF's text layer.

Policy, from allenai/olmocr `pipeline.process_page` (v0.4.27):
- attempt n runs at `TEMPERATURE_BY_ATTEMPT[min(n, len - 1)]`, 8 attempts by default;
- a rotation-valid reply is accepted at once;
- a reply with `is_rotation_valid: False` sends the page round again, re-rendered at
  `(cumulative + rotation_correction) % 360`;
- an unusable reply (unparseable, truncated, over the context) moves to the next
  temperature at the same rotation;
- capacity errors (503/429/refused/timeouts) are *not* attempts and never reach the
  plan: the caller backs off and repeats the same `current` attempt.

Decisions where olmOCR's code is narrower than its intent:
- A rotation-invalid reply on the **last** attempt is accepted (olmOCR: the rotation
  retry only happens while `attempt < MAX_RETRIES - 1`).
- When the attempts run out after a content error, the last *parsed* reply, if there
  was one, is still accepted rather than falling back: a page read by the model at some
  rotation beats the text layer, which is what olmOCR already chooses on the last
  attempt. Only a page with no parsed reply at all is `exhausted`.
- Rotation-invalid replies are recorded in `errors` too, so a page's history says why
  each attempt did not finish it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pagegate.vlm.profiles import ModelProfile
from pagegate.vlm.reply import ROTATIONS, PageReply


@dataclass(frozen=True)
class Attempt:
    """One request to make: which try this is, how hot to sample, how to turn the page."""

    number: int
    temperature: float
    rotation: int


@dataclass(frozen=True)
class AttemptPlan:
    """Where one page stands in its retry schedule. Build with `AttemptPlan.start`."""

    temperatures: tuple[float, ...]
    max_attempts: int
    attempts_made: int = 0
    rotation: int = 0
    accepted: PageReply | None = None
    best_parsed: PageReply | None = None
    errors: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.temperatures:
            raise ValueError("an attempt plan needs at least one temperature")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, not {self.max_attempts}")
        if not 0 <= self.attempts_made <= self.max_attempts:
            raise ValueError("attempts_made must be within 0..max_attempts")
        if self.rotation not in ROTATIONS:
            raise ValueError(f"rotation must be one of 0, 90, 180, 270, not {self.rotation}")

    @classmethod
    def start(cls, profile: ModelProfile, max_attempts: int | None = None) -> AttemptPlan:
        """A fresh plan; by default one attempt per profile temperature (olmOCR: 8)."""
        attempts = len(profile.temperatures) if max_attempts is None else max_attempts
        return cls(temperatures=profile.temperatures, max_attempts=attempts)

    @property
    def exhausted(self) -> bool:
        """No reply to use and no attempts left: the caller falls back to the text layer."""
        return self.accepted is None and self.attempts_made >= self.max_attempts

    @property
    def done(self) -> bool:
        return self.accepted is not None or self.exhausted

    @property
    def attempts_left(self) -> int:
        return 0 if self.done else self.max_attempts - self.attempts_made

    @property
    def current(self) -> Attempt:
        """The attempt to make now; asking a finished plan is a bug in the caller."""
        if self.done:
            raise RuntimeError("the attempt plan is done; there is no current attempt")
        n = self.attempts_made
        temperature = self.temperatures[min(n, len(self.temperatures) - 1)]
        return Attempt(number=n, temperature=temperature, rotation=self.rotation)

    def on_reply(self, reply: PageReply) -> AttemptPlan:
        """The current attempt came back parsed: accept it, or turn the page and go again."""
        attempt = self.current
        made = self.attempts_made + 1
        if reply.is_rotation_valid or made >= self.max_attempts:
            return replace(self, attempts_made=made, accepted=reply, best_parsed=reply)
        turned = (self.rotation + reply.rotation_correction) % 360
        note = (
            f"attempt {attempt.number}: rotation invalid at {attempt.rotation}°, "
            f"correction {reply.rotation_correction}° -> next at {turned}°"
        )
        return replace(
            self,
            attempts_made=made,
            rotation=turned,
            best_parsed=reply,
            errors=(*self.errors, note),
        )

    def on_content_error(self, error: str) -> AttemptPlan:
        """The current attempt's reply was unusable: next temperature, same rotation."""
        attempt = self.current
        made = self.attempts_made + 1
        errors = (*self.errors, f"attempt {attempt.number}: {error}")
        accepted = self.best_parsed if made >= self.max_attempts else None
        return replace(self, attempts_made=made, accepted=accepted, errors=errors)
