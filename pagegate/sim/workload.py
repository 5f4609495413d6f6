"""What simulated pages cost: prompt tokens from the image, output length from the content.

Both are pure functions of the request, so the same page costs the same whatever the
admission strategy, the retry temperature or the order of arrival.

Prompt tokens (Qwen2.5-VL, the base of olmOCR-2):
- The image is resized by `smart_resize` (transformers, Qwen2-VL image processor): both
  sides rounded to multiples of 28 (14-px patches merged 2x2), the area kept within
  [min_pixels, max_pixels] = [3,136, 12,845,056] (Qwen2.5-VL-7B-Instruct's
  preprocessor_config.json). One token per 28x28 px cell.
- Plus 2 vision markers (<|vision_start|>, <|vision_end|>) and 19 tokens of chat template
  (the default system prompt "You are a helpful assistant." and the im_start/im_end
  framing of the system, user and assistant turns, counted by hand).
- Plus the text prompt at ~4 characters per token (English BPE rule of thumb): olmOCR's
  557-character v4 prompt is ~140 tokens.
A 1288x996 px letter page: 46 x 36 = 1,656 image tokens + 21 + 140 = 1,817 tokens, in the
1.7-2.1k range that earlier research gave for a 1288 px page (its primary source was not
recorded).

Output tokens: log-normal with mean 700 (olmOCR on an H100: ~3,100 output tok/s at 4.53
pages/s = ~680 tokens/page; its cost script assumes 750) and sigma 0.6. Sigma is a
judgement: it puts the median at 585, the 5th percentile at 218 (near-empty pages), the
95th at 1,570 and the 99th at 2,370 (dense pages, tables), and leaves the 8,000-token cap
at 4.4 standard deviations, so "length" stops stay rare unless a test lowers max_tokens.

The closed-loop driver at the end measures a profile's saturated throughput on the pure
model of the whole server, front end included (for calibration, tests and docs); it is
not used by the HTTP server.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from statistics import NormalDist

from pagegate.sim.node import NodeModel
from pagegate.sim.profiles import ServerProfile
from pagegate.vlm.layout import smart_resize as qwen_resize
from pagegate.vlm.profiles import OLMOCR_V4_YAML_PROMPT

PATCH_MERGE_PX = 28
"""14-px ViT patches merged 2x2: one LLM token per 28x28 px (Qwen2-VL)."""
MIN_PIXELS = 3_136
MAX_PIXELS = 12_845_056
"""Qwen2.5-VL-7B-Instruct preprocessor_config.json."""
VISION_MARKER_TOKENS = 2
CHAT_TEMPLATE_TOKENS = 19
CHARS_PER_TOKEN = 4.0
OUTPUT_MEAN_TOKENS = 700.0
OUTPUT_SIGMA = 0.6
LETTER_PAGE_PX = (996, 1288)
"""(width, height) of a US-letter page rendered at olmOCR's 1288-px longest side."""

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk, without decoding the image."""
    if len(data) < 24 or not data.startswith(_PNG_SIGNATURE) or data[12:16] != b"IHDR":
        raise ValueError("not a PNG image (missing signature or IHDR chunk)")
    width = int.from_bytes(data[16:20], "big")
    height = int.from_bytes(data[20:24], "big")
    if width < 1 or height < 1:
        raise ValueError(f"PNG has an empty size {width}x{height}")
    return width, height


def smart_resize(width: int, height: int) -> tuple[int, int]:
    """The (width, height) the Qwen2-VL image processor feeds the vision tower."""
    f = PATCH_MERGE_PX
    if min(width, height) < f:
        raise ValueError(f"image {width}x{height} is smaller than {f} px on a side")
    if max(width, height) / min(width, height) > 200:
        raise ValueError(f"image {width}x{height}: aspect ratio above 200")
    h, w = qwen_resize(height, width, factor=f, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    return w, h


def image_tokens(width: int, height: int) -> int:
    w, h = smart_resize(width, height)
    return (w // PATCH_MERGE_PX) * (h // PATCH_MERGE_PX)


def prompt_tokens(width: int, height: int, text_chars: int) -> int:
    """Prompt tokens of one page request: image + markers + chat template + text."""
    text = math.ceil(max(0, text_chars) / CHARS_PER_TOKEN)
    return image_tokens(width, height) + VISION_MARKER_TOKENS + CHAT_TEMPLATE_TOKENS + text


TYPICAL_PROMPT_TOKENS = prompt_tokens(*LETTER_PAGE_PX, len(OLMOCR_V4_YAML_PROMPT))
"""A letter page with olmOCR's prompt (1,817 tokens)."""

_OUTPUT_MEDIAN = OUTPUT_MEAN_TOKENS / math.exp(OUTPUT_SIGMA**2 / 2)
_STANDARD_NORMAL = NormalDist()


def output_tokens(seed: int, digest: str, scale: float = 1.0, sample: int = 0) -> int:
    """How many tokens the model writes for the page with content `digest` (>= 1).

    `scale` (a profile's `output_scale`) stretches the whole distribution, so a page
    keeps its rank among the others whatever model writes it. `sample` counts the page's
    replies cut off at max_tokens so far: such a reply is a sample that ran on, and the
    next is a fresh draw (olmOCR retries a cut-off page because a new sample usually
    ends); sample 0 is the page's own length, whatever else was sent before it."""
    key = f"{seed}\x00{digest}" if sample == 0 else f"{seed}\x00{digest}\x00{sample}"
    h = hashlib.sha256(key.encode()).digest()
    u = (int.from_bytes(h[:8], "big") + 0.5) / 2**64
    z = _STANDARD_NORMAL.inv_cdf(u)
    return max(1, round(scale * _OUTPUT_MEDIAN * math.exp(OUTPUT_SIGMA * z)))


# --- closed-loop driver over the pure model ------------------------------------------


@dataclass(frozen=True)
class ClosedLoopResult:
    """What `run_closed_loop` saw."""

    profile: str
    concurrency: int
    pages: int
    finished: int
    elapsed_s: float
    pages_per_s: float
    """Completions per second between the 20% and 80% completion marks (steady state)."""
    mean_latency_s: float
    output_tokens_per_s: float
    """Generated tokens per second of the requests finished in the same window."""
    preemptions: int
    recomputed_tokens: int
    max_running: int
    max_waiting: int
    max_kv_usage: float
    crashed: bool


def run_closed_loop(
    profile: ServerProfile,
    *,
    concurrency: int,
    pages: int,
    seed: int = 0,
    prompt: int = TYPICAL_PROMPT_TOKENS,
    max_tokens: int = 8_000,
) -> ClosedLoopResult:
    """Keep `concurrency` requests in flight until `pages` have finished (or the server dies)."""
    if concurrency < 1 or pages < 1:
        raise ValueError("concurrency and pages must be >= 1")
    model = NodeModel(profile, start=0.0)
    submitted = 0
    finished: list[float] = []
    latencies: list[float] = []
    tokens: list[int] = []
    max_running = max_waiting = 0
    max_kv = 0.0

    def submit(now: float) -> None:
        nonlocal submitted
        out = output_tokens(seed, f"page-{submitted}", profile.output_scale)
        model.submit(f"p{submitted}", prompt, out, max_tokens, now)
        submitted += 1

    for _ in range(min(concurrency, pages)):
        if model.crashed:
            break
        submit(0.0)
    while not model.crashed and len(finished) < pages:
        at = model.next_event_at()
        if at is None:
            break
        for done in model.advance(at):
            finished.append(done.finished_at)
            latencies.append(done.latency)
            tokens.append(done.completion_tokens)
            if submitted < pages and not model.crashed:
                submit(at)
        snap = model.snapshot()
        max_running = max(max_running, snap.running)
        max_waiting = max(max_waiting, snap.waiting)
        max_kv = max(max_kv, snap.kv_usage)
    snap = model.snapshot()
    elapsed = finished[-1] if finished else 0.0
    # Steady state: the completions between the 20% and 80% marks, free of ramp-up and drain.
    lo, hi = int(len(finished) * 0.2), max(int(len(finished) * 0.8) - 1, 0)
    window = finished[hi] - finished[lo] if hi > lo else 0.0
    if window > 0:
        rate = (hi - lo) / window
        token_rate = sum(tokens[lo + 1 : hi + 1]) / window
    else:
        rate = len(finished) / elapsed if elapsed else 0.0
        token_rate = sum(tokens) / elapsed if elapsed else 0.0
    return ClosedLoopResult(
        profile=profile.name,
        concurrency=concurrency,
        pages=pages,
        finished=len(finished),
        elapsed_s=elapsed,
        pages_per_s=rate,
        mean_latency_s=sum(latencies) / len(latencies) if latencies else 0.0,
        output_tokens_per_s=token_rate,
        preemptions=snap.preemptions_total,
        recomputed_tokens=snap.recomputed_tokens_total,
        max_running=max_running,
        max_waiting=max_waiting,
        max_kv_usage=max_kv,
        crashed=snap.crashed,
    )
