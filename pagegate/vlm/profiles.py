"""Model profiles: everything a model was trained to expect, kept as data.

A profile pins the exact prompt, the reply format and the sampling schedule of one
model family. The page client reads them from here and never hard-codes them, so a
new model (or a new prompt version) is a new entry, and every output document records
which prompt version produced it.

Facts in `OLMOCR_2` come from allenai/olmocr at v0.4.27 (HEAD f7cfe4c):
- prompt: `olmocr/prompts/prompts.py`, `build_no_anchoring_v4_yaml_prompt()`;
- max tokens: `MAX_TOKENS = 8000` in `olmocr/pipeline.py`, `build_page_query`;
- temperatures: `TEMPERATURE_BY_ATTEMPT` in `olmocr/pipeline.py`, `process_page`;
- context: `MODEL_MAX_CONTEXT = 16384` in `process_page` (and `--max_model_len` 16384);
- default model: the `--model` default of `olmocr/pipeline.py`.
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelProfile:
    """The contract between pagegate and one model: what to send and what comes back."""

    name: str
    source: str
    prompt: str
    prompt_version: str
    reply_format: str
    max_tokens: int
    temperatures: tuple[float, ...]
    max_context_tokens: int
    default_model: str

    def __post_init__(self) -> None:
        if not self.name or not self.prompt:
            raise ValueError("a profile needs a name and a prompt")
        if not self.temperatures:
            raise ValueError(f"profile {self.name!r}: temperatures must not be empty")
        if any(not math.isfinite(t) or t < 0 for t in self.temperatures):
            raise ValueError(f"profile {self.name!r}: temperatures must be finite and >= 0")
        if self.max_tokens < 1 or self.max_context_tokens < self.max_tokens:
            raise ValueError(
                f"profile {self.name!r}: need 1 <= max_tokens <= max_context_tokens"
            )


OLMOCR_V4_YAML_PROMPT = (
    "Attached is one page of a document that you must process. "
    "Just return the plain text representation of this document as if you were reading it "
    "naturally. Convert equations to LateX and tables to HTML.\n"
    "If there are any figures or charts, label them with the following markdown syntax "
    "![Alt text describing the contents of the figure](page_startx_starty_width_height.png)\n"
    "Return your output as markdown, with a front matter section on top specifying values "
    "for the primary_language, is_rotation_valid, rotation_correction, is_table, and "
    "is_diagram parameters."
)
"""Verbatim, including the model's training-time spelling "LateX"; do not "fix" it."""

OLMOCR_2 = ModelProfile(
    name="olmocr-2",
    source=(
        "allenai/olmocr v0.4.27 (f7cfe4c): olmocr/prompts/prompts.py "
        "build_no_anchoring_v4_yaml_prompt(); olmocr/pipeline.py build_page_query "
        "(MAX_TOKENS) and process_page (TEMPERATURE_BY_ATTEMPT, MODEL_MAX_CONTEXT); "
        "reply parsed like olmocr FrontMatterParser + PageResponse"
    ),
    prompt=OLMOCR_V4_YAML_PROMPT,
    prompt_version="olmocr-no-anchoring-v4-yaml",
    reply_format="yaml-front-matter",
    max_tokens=8000,
    temperatures=(0.1, 0.1, 0.2, 0.3, 0.5, 0.8, 0.9, 1.0),
    max_context_tokens=16384,
    default_model="allenai/olmOCR-2-7B-1025-FP8",
)

PROFILES: Mapping[str, ModelProfile] = types.MappingProxyType({OLMOCR_2.name: OLMOCR_2})
"""Every known profile by name; read-only so no caller can swap a profile at runtime."""

DEFAULT_PROFILE = OLMOCR_2.name


def get_profile(name: str) -> ModelProfile:
    """The profile called `name`; a typo fails loudly with the names that do exist."""
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise ValueError(f"unknown model profile {name!r}; known profiles: {known}") from None
