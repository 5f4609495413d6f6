"""Notice a dead, unhealthy, hung or unresponsive server and restart it.

The detector is pure: `observe` folds one probe into a small state (since when the
token counter has been flat with work on the server, since when /health has gone
unanswered) and `classify` names the condition. Conditions (sources named on each):

- DEAD: the process exited.
- UNHEALTHY: /health answered 503 (vLLM: the engine core died, PR #24897).
- HUNG: requests on the server (waiting + running > 0) but `vllm:generation_tokens_total`
  has not moved for `hang_after` seconds: the engine can hang while the API still
  answers 200 (vLLM #39863).
- UNRESPONSIVE: the process lives but /health has not answered for `unanswered_after`
  seconds. One slow probe is not enough: a burst of requests can hold /health past 10 s
  (Ray #54070), so the limit is long and each probe's timeout generous.

`Supervisor` is the shell: it probes every `interval`, and on any condition restarts the
server under a `RestartBudget`. Pages in flight see connection errors or 5xx meanwhile;
PageOcr counts those as capacity errors, backs off and resubmits them without spending a
page attempt, and the gate pauses once failed scrapes leave its reading stale, so nothing
else has to be told.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field, replace
from typing import Protocol

import httpx

from pagegate.clock import Clock
from pagegate.errors import MetricsError
from pagegate.server.metrics import parse_vllm_metrics
from pagegate.server.restart_budget import RestartBudget

log = logging.getLogger("pagegate.server")


class Condition(enum.StrEnum):
    HEALTHY = "healthy"
    DEAD = "dead"
    UNHEALTHY = "unhealthy"
    HUNG = "hung"
    UNRESPONSIVE = "unresponsive"


@dataclass(frozen=True)
class Probe:
    """One look at the server. None: not known (no answer, or metrics not exported)."""

    process_alive: bool
    health_status: int | None
    in_server: int | None = None             # waiting + running, from /metrics
    generation_tokens_total: float | None = None


@dataclass(frozen=True)
class WatchState:
    flat_since: float
    last_tokens: float | None = None
    busy: bool = False                       # the last probe saw requests on the server
    unanswered_since: float | None = None

    @classmethod
    def fresh(cls, now: float) -> WatchState:
        return cls(flat_since=now)


@dataclass(frozen=True)
class WatchLimits:
    hang_after: float = 180.0
    unanswered_after: float = 60.0

    def __post_init__(self) -> None:
        if self.hang_after <= 0 or self.unanswered_after <= 0:
            raise ValueError("hang_after and unanswered_after must be positive")


def observe(state: WatchState, probe: Probe, now: float) -> WatchState:
    """Fold one probe into the state. The flat clock restarts whenever tokens move, the
    server is (or just was) idle, or the counter cannot be read: no evidence of a hang."""
    tokens = probe.generation_tokens_total
    moved = tokens is None or state.last_tokens is None or tokens != state.last_tokens
    busy = probe.in_server is not None and probe.in_server > 0
    flat_since = state.flat_since if (busy and state.busy and not moved) else now
    if probe.health_status is not None:
        unanswered_since = None
    else:
        unanswered_since = state.unanswered_since if state.unanswered_since is not None else now
    return replace(state, flat_since=flat_since, last_tokens=tokens, busy=busy,
                   unanswered_since=unanswered_since)


def classify(state: WatchState, probe: Probe, now: float, limits: WatchLimits) -> Condition:
    """The server's condition after `observe` has seen `probe` (worst condition first)."""
    if not probe.process_alive:
        return Condition.DEAD
    if probe.health_status == 503:
        return Condition.UNHEALTHY
    if state.unanswered_since is not None and now - state.unanswered_since >= limits.unanswered_after:
        return Condition.UNRESPONSIVE
    if now - state.flat_since >= limits.hang_after:
        return Condition.HUNG
    return Condition.HEALTHY


@dataclass(frozen=True)
class WatchdogConfig:
    interval_seconds: float = 2.0
    probe_timeout_seconds: float = 15.0
    limits: WatchLimits = field(default_factory=WatchLimits)
    restart_capacity: int = 5
    restart_refill_seconds: float = 600.0


@dataclass(frozen=True)
class Recovery:
    """One incident: when it was noticed, why, and when the server was ready again."""

    condition: Condition
    detected_at: float
    recovered_at: float
    attempts: int

    @property
    def recovery_seconds(self) -> float:
        return self.recovered_at - self.detected_at


class ManagedServer(Protocol):
    """What the supervisor needs of a launcher (VllmLauncher in production)."""

    @property
    def alive(self) -> bool: ...

    async def restart(self) -> None: ...


class Supervisor:
    """Watch one managed server until cancelled; restart it when it fails."""

    def __init__(
        self,
        server: ManagedServer,
        *,
        root_url: str,
        http: httpx.AsyncClient,
        clock: Clock,
        config: WatchdogConfig | None = None,
    ) -> None:
        self._server = server
        self._root = root_url.rstrip("/")
        self._http = http
        self._clock = clock
        self.config = config or WatchdogConfig()
        self.budget = RestartBudget.full(
            self.config.restart_capacity, self.config.restart_refill_seconds, clock.now()
        )
        self.recoveries: list[Recovery] = []
        self.condition = Condition.HEALTHY

    async def run(self) -> None:
        state = WatchState.fresh(self._clock.now())
        while True:
            await self._clock.sleep(self.config.interval_seconds)
            probe = await self.probe()
            now = self._clock.now()
            state = observe(state, probe, now)
            self.condition = classify(state, probe, now, self.config.limits)
            if self.condition is Condition.HEALTHY:
                continue
            log.warning("server %s (%s); restarting it", self.condition, self._root)
            self.recoveries.append(await self._recover(self.condition, detected_at=now))
            self.condition = Condition.HEALTHY
            state = WatchState.fresh(self._clock.now())

    async def probe(self) -> Probe:
        if not self._server.alive:
            return Probe(process_alive=False, health_status=None)
        timeout = self.config.probe_timeout_seconds
        try:
            status: int | None = (await self._http.get(f"{self._root}/health", timeout=timeout)).status_code
        except httpx.HTTPError:
            status = None
        in_server: int | None = None
        tokens: float | None = None
        if status == 200:
            try:
                response = await self._http.get(f"{self._root}/metrics", timeout=timeout)
                reading = parse_vllm_metrics(response.text, at=self._clock.now())
                in_server = reading.waiting + reading.running
                tokens = reading.generation_tokens_total
            except (httpx.HTTPError, MetricsError):
                pass
        return Probe(self._server.alive, status, in_server, tokens)

    async def _recover(self, condition: Condition, *, detected_at: float) -> Recovery:
        """Restart until one start succeeds, waiting for the budget when it is spent.

        The run is never ended from here: while the server is down, pages back off, and
        PageOcr's own deadline records PDFs as `server_unavailable` if this takes too long.
        """
        attempts = 0
        while True:
            allowed, self.budget = self.budget.take(self._clock.now())
            if not allowed:
                wait = self.budget.seconds_until_next(self._clock.now())
                log.error("restart budget spent; next restart in %.0f s", wait)
                await self._clock.sleep(wait)
                continue
            attempts += 1
            try:
                await self._server.restart()
            except Exception as exc:
                log.error("restart %d failed: %s", attempts, exc)
                continue
            recovered_at = self._clock.now()
            log.warning("server back after %s: %.1f s from detection (%d restart(s))",
                        condition, recovered_at - detected_at, attempts)
            return Recovery(condition, detected_at, recovered_at, attempts)

