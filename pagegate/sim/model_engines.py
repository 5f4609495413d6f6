"""Engines for the OCR models beyond olmOCR-2: what each changes about the gate's problem.

The gate never sees a model, only a server: how many requests run at once, how much KV
cache and prefill a page costs, how long its reply is, and how much image work the front
end does before the engine sees it. Each engine below is the `h100` profile with those
four things set from the model's own sources (pagegate/vlm/profiles.py cites them), and
judged against its own yardstick (docs/simulator.md); the H100's step costs, calibrated
on olmOCR-2's 7B model, are kept, so the figures say whether the gate saturates each
shape of server, not how fast each model is (docs/models.md gives their own claims).

Image cost. The simulator prices a page's image as Qwen2-VL does, one token per 28x28 px
(pagegate/sim/workload.py), and the front end by its pixels. Each engine's page is the
size the profile's image rule renders a US-letter page at (Chandra, dots.mocr,
Nanonets-OCR2); for models whose processor counts tokens otherwise it is a page whose
28-px token count is the model's own count for that page, shown per engine.

Output length. `output_scale` stretches olmOCR's ~700-token page (workload.py). Layout
formats write a box and a label per block on top of the same text: ~20 blocks on a
typical page x ~25 tokens for `{"bbox": [x0, y0, x1, y1], "category": "Text", "text": }`
or `<div data-bbox="[...]" data-label="Text">...</div>` is ~500 tokens, so ~1.7 x
[derived; the 20 blocks a page is a judgement]. Markdown-only formats keep 1.0.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import replace

from pagegate.sim.profiles import H100, ServerProfile

LAYOUT_OUTPUT_SCALE = 1.7
"""~700 text tokens + ~20 blocks x ~25 tokens of box and label (module docstring)."""

CHANDRA_2 = replace(
    H100,
    name="h100-chandra-2",
    gpu="NVIDIA H100 80 GB, Chandra 2 as datalab-to/chandra serves it",
    # chandra/scripts/vllm.py: --max-num-seqs 32 --max-model-len 32768
    # --max_num_batched_tokens 65536.                                             [fact]
    max_num_seqs=32,
    max_model_len=32_768,
    max_num_batched_tokens=65_536,
    output_scale=LAYOUT_OUTPUT_SCALE,  # HTML layout blocks.                  [derived]
)

DOTS_MOCR = replace(
    H100,
    name="h100-dots-mocr",
    gpu="NVIDIA H100 80 GB, dots.mocr as its README serves it",
    # README's vllm serve sets no --max-num-seqs: vLLM's default at >= 70 GiB, 1,024
    # (vllm/engine/arg_utils.py), as for h100.                                    [fact]
    max_model_len=32_768,  # pagegate.vlm.profiles DOTS_MOCR: 14,400 image + 16,384 out. [derived]
    output_scale=LAYOUT_OUTPUT_SCALE,  # JSON layout cells.                   [derived]
)

DEEPSEEK_OCR = replace(
    H100,
    name="h100-deepseek-ocr",
    gpu="NVIDIA H100 80 GB, DeepSeek-OCR as vllm-project/recipes serves it",
    # recipes models/deepseek-ai/DeepSeek-OCR.yaml: no --max-num-seqs (vLLM's default,
    # 1,024 at >= 70 GiB), context_length 8192.                                   [fact]
    max_model_len=8_192,
    # Grounding tags: <|ref|>label<|/ref|><|det|>[[x0, y0, x1, y1]]<|/det|>, ~20 tokens
    # a block x ~20 blocks on ~700 tokens of markdown.                         [derived]
    output_scale=1.6,
)

NANONETS_OCR2 = replace(
    H100,
    name="h100-nanonets-ocr2",
    gpu="NVIDIA H100 80 GB, Nanonets-OCR2-3B with plain vllm serve",
    # plain `vllm serve nanonets/Nanonets-OCR2-3B`: vLLM's defaults (1,024 slots).  [fact]
    max_model_len=32_768,  # pagegate.vlm.profiles NANONETS_OCR2.                [derived]
    output_scale=1.0,  # markdown with HTML tables, as olmOCR writes.          [judgement]
)

GRANITE_DOCLING = replace(
    H100,
    name="h100-granite-docling",
    gpu="NVIDIA H100 80 GB, granite-docling-258M with plain vllm serve",
    max_model_len=8_192,  # pagegate.vlm.profiles GRANITE_DOCLING.               [derived]
    # DocTags: 4 location tokens and a tag pair per element, ~6 tokens x ~20
    # elements on ~700 tokens of text.                                         [derived]
    output_scale=1.2,
)

QWEN3_VL = replace(
    H100,
    name="h100-qwen3-vl",
    gpu="NVIDIA H100 80 GB, Qwen3-VL with the recipe's flags",
    max_model_len=16_384,  # pagegate.vlm.profiles QWEN3_VL_MARKDOWN.            [derived]
    output_scale=1.0,  # plain markdown.                                       [judgement]
)

MODEL_ENGINES: Mapping[str, ServerProfile] = types.MappingProxyType({
    e.name: e for e in (CHANDRA_2, DOTS_MOCR, DEEPSEEK_OCR, NANONETS_OCR2, GRANITE_DOCLING,
                        QWEN3_VL)
})

PAGE_PX: Mapping[str, tuple[int, int]] = types.MappingProxyType({
    # 192 dpi letter page (Chandra's rule), priced by the 28-px rule: 58 x 75 = 4,350
    # tokens, an upper bound if the model's patches are larger.                 [derived]
    "h100-chandra-2": (1632, 2112),
    # 200 dpi letter page, priced by dots' own 28-px rule (dots_ocr/utils/consts.py):
    # 1700x2200 -> 61 x 79 = 4,819 tokens.                                       [derived]
    "h100-dots-mocr": (1700, 2200),
    # Gundam mode, n x 640x640 tiles + one 1024x1024 view, at 100 and 256 vision tokens
    # (DeepSeek-OCR README's mode list): n x 100 + 256; a 144 dpi letter page cuts into 6 tiles: 856 tokens, which
    # 28-px cells give at 728x924 (26 x 33 = 858).                               [derived]
    "h100-deepseek-ocr": (728, 924),
    # shortest side 1280 px (olmocr's run_nanonetsocr_2.py), Qwen2.5-VL's 28-px rule:
    # 1280x1657 -> 46 x 59 = 2,714 tokens.                                      [derived]
    "h100-nanonets-ocr2": (1280, 1657),
    # Idefics3 (granite-docling's base): 512-px tiles of 64 tokens each plus a global
    # view; a 144 dpi letter page (1224x1584) is 3 x 4 tiles + 1 = 832 tokens, which
    # 28-px cells give at 728x896 (26 x 32).                                     [derived]
    "h100-granite-docling": (728, 896),
    # 144 dpi letter page, Qwen3-VL's 32-px tokens: 38 x 50 = 1,900 tokens, 28-px cells
    # at 1064x1400 (38 x 50).                                                    [derived]
    "h100-qwen3-vl": (1064, 1400),
})
"""Each engine's page image (width, height) in pixels: its image cost (module docstring)."""
