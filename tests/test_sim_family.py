"""The random family of engines: deterministic, within its stated ranges, never unsafe for a
slot-sized closed loop, and honest about vllm:cache_config_info."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace

import httpx
import pytest

from pagegate.clock import FakeClock, settle
from pagegate.sim import family as fam
from pagegate.sim.app import build_app
from pagegate.sim.config import SimConfig
from pagegate.sim.driver import SimEngine
from pagegate.sim.family import draw_engine, family, page_kv_tokens
from pagegate.sim.profiles import CI, ServerProfile
from pagegate.sim.workload import TYPICAL_PROMPT_TOKENS, output_tokens

ENGINES = family(300, seed=7)


def within(value: float, bounds: tuple[float, float], rel: float = 1e-9) -> bool:
    low, high = bounds
    return low * (1 - rel) <= value <= high * (1 + rel)


def test_same_seed_and_index_give_the_same_engine() -> None:
    assert draw_engine(3, 5) == draw_engine(3, 5)
    assert family(4, seed=3)[2] == draw_engine(3, 2)


def test_different_indexes_and_seeds_differ() -> None:
    profiles = [e.profile for e in family(20, seed=3)]
    assert len({(p.max_num_seqs, p.num_gpu_blocks, p.step_base_s) for p in profiles}) == 20
    assert draw_engine(3, 0).profile != draw_engine(4, 0).profile


def test_engines_carry_where_they_came_from() -> None:
    engine = draw_engine(11, 4)
    assert (engine.seed, engine.index) == (11, 4)
    assert engine.profile.name == "family-11-4"
    assert "slots" in engine.describe() and "\n" not in engine.describe()


def test_every_parameter_is_within_its_range() -> None:
    for engine in ENGINES:
        p, fe = engine.profile, engine.profile.frontend
        assert fe is not None
        why = engine.describe()
        assert within(p.max_num_seqs, fam.SLOTS), why
        assert p.data_parallel_size in (1, *fam.DATA_PARALLEL_SIZES), why
        assert p.block_size == fam.BLOCK_SIZE, why
        floor_blocks = math.ceil(p.max_model_len / p.block_size) + 1
        at_floor = p.num_gpu_blocks == floor_blocks
        # Above the range's top only by the rounding up to whole blocks.
        slack = p.block_size / (p.max_num_seqs * page_kv_tokens(p.output_scale))
        assert at_floor or within(engine.kv_factor, (fam.KV_FACTOR[0], fam.KV_FACTOR[1] + slack)), why
        assert p.max_model_len in (fam.MAX_MODEL_LEN, fam.MODEL_LEN_FLOOR), why
        assert p.max_num_batched_tokens in fam.BATCHED_TOKENS or (
            p.max_num_batched_tokens == p.max_num_seqs), why
        assert within(p.step_base_s, fam.STEP_BASE_S), why
        assert within(p.step_per_seq_s, fam.STEP_PER_SEQ_S), why
        assert within(p.prefill_tokens_per_s, fam.PREFILL_TOKENS_PER_S), why
        assert within(p.output_scale, fam.OUTPUT_SCALE), why
        assert p.max_new_tokens is None or within(p.max_new_tokens, fam.MAX_NEW_TOKENS), why
        assert within(fe.loop_base_s, fam.LOOP_BASE_S), why
        assert within(fe.loop_s_per_mb, fam.LOOP_S_PER_MB), why
        assert within(fe.mm_base_s, fam.MM_BASE_S), why
        assert within(fe.mm_s_per_mpx, fam.MM_S_PER_MPX), why
        assert within(fe.scrape_s, fam.SCRAPE_S), why
        assert 1 <= fe.api_server_count <= fam.API_SERVERS[1], why
        assert p.host_mb_per_request == fam.HOST_MB_PER_REQUEST, why
        assert p.cpu_contention == (1.0, 1.0), why


def test_the_ranges_are_all_visited() -> None:
    """300 engines reach both ends of the wide ranges and every on/off switch both ways."""
    seqs = [e.profile.max_num_seqs for e in ENGINES]
    assert min(seqs) < 8 and max(seqs) > 512
    assert all(e.profile.max_new_tokens is None for e in ENGINES)  # MAX_NEW_TOKENS_SHARE
    scrapes = [e.profile.frontend.scrape_s for e in ENGINES if e.profile.frontend]
    assert min(scrapes) < 0.003 and max(scrapes) > 1.0
    for flag in (
        lambda e: e.profile.crash_waiting is None,
        lambda e: e.profile.host_mem_limit_mb is None,
        lambda e: e.profile.max_num_queued_reqs is None,
        lambda e: e.exports_cache_config,
        lambda e: e.profile.data_parallel_size == 1,
        lambda e: e.profile.max_model_len == fam.MAX_MODEL_LEN,
    ):
        assert {flag(e) for e in ENGINES} == {True, False}


def test_a_slot_sized_closed_loop_cannot_kill_or_be_refused() -> None:
    for engine in ENGINES:
        p, why = engine.profile, engine.describe()
        assert engine.slots == p.data_parallel_size * p.max_num_seqs
        if p.crash_waiting is not None:
            assert engine.slots < p.crash_waiting <= fam.CRASH_OVER_SLOTS * engine.slots, why
        if p.host_mem_limit_mb is not None:
            held = engine.slots * p.host_mb_per_request
            assert p.host_mem_limit_mb >= fam.HOST_LIMIT_OVER_SLOTS[0] * held * (1 - 1e-9), why
        if p.max_num_queued_reqs is not None:
            assert engine.slots < p.max_num_queued_reqs, why


def test_every_engine_takes_a_full_page_request() -> None:
    """The profiles validated when drawn; each also fits the client's request whole."""
    assert fam.MODEL_LEN_FLOOR >= TYPICAL_PROMPT_TOKENS + fam.CLIENT_MAX_TOKENS
    for engine in ENGINES:
        p = engine.profile
        assert replace(p) == p  # __post_init__ runs again and passes
        assert p.max_model_len >= TYPICAL_PROMPT_TOKENS + fam.CLIENT_MAX_TOKENS
        assert p.kv_tokens >= p.max_model_len + p.block_size


def test_output_scale_stretches_every_page() -> None:
    pages = [f"page-{i}" for i in range(50)]
    plain = [output_tokens(0, d) for d in pages]
    assert plain == [output_tokens(0, d, 1.0) for d in pages]
    doubled = [output_tokens(0, d, 2.0) for d in pages]
    assert all(abs(b - 2 * a) <= 1 for a, b in zip(plain, doubled, strict=True))


def test_family_rejects_a_negative_count() -> None:
    assert family(0, seed=1) == []
    with pytest.raises(ValueError):
        family(-1, seed=1)


async def scrape(profile: ServerProfile) -> str:
    """One /metrics answer from the in-process app; the fake clock moves until the simulated
    API server's loop has done the scrape's work (up to 2 s for a family engine)."""
    clock = FakeClock()
    config = SimConfig(profile="ci")
    engine = SimEngine(config, clock, profile=profile)
    app = build_app(config, engine=engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://sim") as http:
        task = asyncio.create_task(http.get("/metrics"))
        await settle()
        for _ in range(100):
            if task.done():
                break
            await clock.advance(0.05)
        response = await task
    await engine.stop()
    assert response.status_code == 200
    return response.text


def test_cache_config_info_is_served_only_when_exported() -> None:
    assert "vllm:cache_config_info{" in asyncio.run(scrape(CI))
    without = asyncio.run(scrape(replace(CI, exports_cache_config=False)))
    assert "vllm:cache_config_info" not in without
    assert "vllm:num_requests_waiting{" in without


def test_a_drawn_engine_without_cache_config_serves_metrics_without_it() -> None:
    engine = next(e for e in ENGINES if not e.exports_cache_config and e.profile.data_parallel_size > 1)
    text = asyncio.run(scrape(engine.profile))
    assert "vllm:cache_config_info" not in text
    assert text.count("vllm:num_requests_running{") == engine.profile.data_parallel_size
