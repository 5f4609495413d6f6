"""The engines the virtual bench judges the gate on: the named profiles and the random family.

Each named profile runs a workload long enough to pass the ramp and several cooldowns
(`NAMED_PAGES`). One profile is adapted for the page path: `vllm-cpu` caps every reply
at 64 tokens (its server's `max_new_tokens`, as the real engine runs with
`--override-generation-config`), and a capped reply ends with finish_reason "length",
which the olmOCR parser rejects as a truncated page. In the virtual world its pages
instead carry 64 tokens on average (output scale 64/700) with no cap: the same work per
page as on the real engine, with replies the page path accepts.
"""

from __future__ import annotations

import dataclasses

from pagegate.sim.family import FamilyEngine, family
from pagegate.sim.model_engines import MODEL_ENGINES, PAGE_PX
from pagegate.sim.profiles import PROFILES, ServerProfile
from pagegate.sim.virtual import Workload
from pagegate.sim.workload import LETTER_PAGE_PX, OUTPUT_MEAN_TOKENS

NAMED_PAGES = {
    "rtx4090": 1200,
    "l40s": 1000,
    "h100": 1500,
    "h100-dp8": 3000,
    "ci": 800,
    "vllm-cpu": 800,
    "h100-chandra-2": 600,
    "h100-dots-mocr": 1500,
    "h100-deepseek-ocr": 4500,
    "h100-nanonets-ocr2": 2300,
    "h100-granite-docling": 4900,
    "h100-qwen3-vl": 2900,
}
"""Pages per named profile: 8-20 x the pages the best closed loop keeps in flight (the
h100-<model> engines: pagegate/sim/model_engines.py)."""
VLLM_CPU_REPLY_TOKENS = 64
"""scripts/vllm-cpu-env's --override-generation-config max_new_tokens."""


def named_engine(name: str) -> ServerProfile:
    """The named profile as the virtual page path runs it (module docstring)."""
    if name in MODEL_ENGINES:
        return MODEL_ENGINES[name]
    profile = PROFILES[name]
    if name == "vllm-cpu":
        return dataclasses.replace(profile, max_new_tokens=None,
                                   output_scale=VLLM_CPU_REPLY_TOKENS / OUTPUT_MEAN_TOKENS)
    return profile


def named_workload(name: str, seed: int = 0) -> Workload:
    """The named profile's pages, each the size its model's image rule gives."""
    return Workload(NAMED_PAGES[name], seed=seed, page_px=PAGE_PX.get(name, LETTER_PAGE_PX))


def family_pages(engine: FamilyEngine) -> int:
    """A family engine's workload: 8 x its slots, within 400 ... 3,000 pages."""
    return max(400, min(3000, 8 * engine.slots))


__all__ = ["NAMED_PAGES", "FamilyEngine", "family", "family_pages", "named_engine",
           "named_workload"]
