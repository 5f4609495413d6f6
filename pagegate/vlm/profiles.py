"""Model profiles: everything a model was trained to expect, kept as data.

A profile pins the exact prompt, the image size, the sampling schedule, the extra
request fields, the reply format and the `vllm serve` flags of one model. The page
client, the renderer and the launcher read them from here and never hard-code them, so
a new model (or a new prompt version) is a new entry, and every output document records
which profile and prompt version produced it. Each profile's `source` names the files
its facts come from; docs/models.md has the table of all of them.

Two choices are pagegate's own, the same for every profile:
- Retries. The first attempt samples as the model's own client does; a failed reply is
  retried at the higher temperatures of olmOCR's schedule (`TEMPERATURE_BY_ATTEMPT`),
  unless the model's client has a retry temperature of its own (Chandra's 0.3).
- Boxes. Each profile says in `box_frame` what its coordinates are relative to, so the
  parsers can hand back page fractions and the page path can turn them into PDF points.

Why one long module: it is a table of data. Each prompt is kept verbatim next to the
profile that sends it, so a reviewer compares one entry with its cited file in one place.
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MAX_PIXELS = 1288 * 1288 * 2
"""The renderer's memory bound when a model names none (pagegate.pdf.reader's default)."""

OLMOCR_TEMPERATURES = (0.1, 0.1, 0.2, 0.3, 0.5, 0.8, 0.9, 1.0)
"""allenai/olmocr v0.4.27 `olmocr/pipeline.py` process_page, TEMPERATURE_BY_ATTEMPT."""

REPLY_FORMATS = ("yaml-front-matter", "chandra-html", "dots-json", "deepseek-grounding",
                 "nanonets-markdown", "doctags", "markdown")
"""Every reply format a parser exists for (pagegate.vlm.formats)."""

BOX_FRAMES = ("none", "normalized", "resized-pixels")
"""How a reply's boxes are expressed: not at all; on a 0..`box_scale` grid of the image;
or in pixels of the image as the model's processor resized it (multiples of 28)."""


@dataclass(frozen=True)
class ImageRule:
    """How large the page image is: one base rule, then the model's pixel bound.

    Exactly one of `dpi`, `longest_side` or `shortest_side` sets the scale; the image is
    then shrunk, if needed, to at most `max_pixels` pixels and `max_side` on its longest
    side (pagegate.pdf.reader.plan_render does the arithmetic).
    """

    dpi: float | None = None
    longest_side: int | None = None
    shortest_side: int | None = None
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_side: int = 10_000

    def __post_init__(self) -> None:
        given = [v for v in (self.dpi, self.longest_side, self.shortest_side) if v is not None]
        if len(given) != 1:
            raise ValueError("an image rule needs exactly one of dpi, longest_side, shortest_side")
        if given[0] <= 0 or self.max_pixels < 1 or self.max_side < 1:
            raise ValueError("image rule sizes must be positive")

    def describe(self) -> str:
        """One line for docs and logs: '192 dpi, at most 6,291,456 px'."""
        if self.dpi is not None:
            base = f"{self.dpi:g} dpi"
        elif self.longest_side is not None:
            base = f"longest side {self.longest_side} px"
        else:
            base = f"shortest side {self.shortest_side} px"
        return f"{base}, at most {self.max_pixels:,} px"


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
    image: ImageRule = ImageRule(longest_side=1288)
    image_first: bool = False
    """Image part before the prompt text (most models), or after it (olmOCR)."""
    system_prompt: str | None = None
    top_p: tuple[float, ...] = ()
    """top_p by attempt, like `temperatures` (the last one repeats); () sends none."""
    extra_fields: Mapping[str, Any] = field(default_factory=dict)
    """Request fields beyond the OpenAI ones (vLLM's `skip_special_tokens`, `vllm_xargs`, `stop`)."""
    serve_args: tuple[str, ...] = ()
    """`vllm serve` flags the launcher adds unless the command already sets the flag."""
    box_frame: str = "none"
    box_scale: int = 0
    aliases: tuple[str, ...] = ()
    """Lower-case fragments of model names that mean this profile (`infer_profile`)."""

    def __post_init__(self) -> None:
        if not self.name or not self.prompt:
            raise ValueError("a profile needs a name and a prompt")
        if not self.temperatures:
            raise ValueError(f"profile {self.name!r}: temperatures must not be empty")
        if any(not math.isfinite(t) or t < 0 for t in (*self.temperatures, *self.top_p)):
            raise ValueError(f"profile {self.name!r}: temperatures must be finite and >= 0")
        if self.max_tokens < 1 or self.max_context_tokens < self.max_tokens:
            raise ValueError(
                f"profile {self.name!r}: need 1 <= max_tokens <= max_context_tokens"
            )
        if self.reply_format not in REPLY_FORMATS:
            raise ValueError(f"profile {self.name!r}: unknown reply format {self.reply_format!r}")
        if self.box_frame not in BOX_FRAMES or (self.box_frame == "normalized") != (self.box_scale > 0):
            raise ValueError(f"profile {self.name!r}: a normalized box frame needs a box_scale")
        object.__setattr__(self, "extra_fields", types.MappingProxyType(dict(self.extra_fields)))

    @property
    def gives_layout(self) -> bool:
        return self.box_frame != "none"

    def top_p_for(self, attempt: int) -> float | None:
        """The top_p of attempt `attempt` (0-based), or None to leave vLLM's default."""
        if not self.top_p:
            return None
        return self.top_p[min(attempt, len(self.top_p) - 1)]


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
        "(MAX_TOKENS, target_longest_image_dim 1288) and process_page "
        "(TEMPERATURE_BY_ATTEMPT, MODEL_MAX_CONTEXT); reply parsed like olmocr "
        "FrontMatterParser + PageResponse; serve flags are VllmSettings' defaults"
    ),
    prompt=OLMOCR_V4_YAML_PROMPT,
    prompt_version="olmocr-no-anchoring-v4-yaml",
    reply_format="yaml-front-matter",
    max_tokens=8000,
    temperatures=OLMOCR_TEMPERATURES,
    max_context_tokens=16384,
    default_model="allenai/olmOCR-2-7B-1025-FP8",
    image=ImageRule(longest_side=1288),
    aliases=("olmocr",),
)

_CHANDRA_ALLOWED_TAGS = [
    "math", "br", "i", "b", "u", "del", "sup", "sub", "table", "tr", "td", "p", "th", "div",
    "pre", "h1", "h2", "h3", "h4", "h5", "ul", "ol", "li", "input", "a", "span", "img", "hr",
    "tbody", "small", "caption", "strong", "thead", "big", "code",
]
_CHANDRA_ALLOWED_ATTRIBUTES = [
    "class", "colspan", "rowspan", "display", "checked", "type", "border", "value", "style",
    "href", "alt", "align",
]
CHANDRA_BBOX_SCALE = 1000
CHANDRA_LAYOUT_PROMPT = (
    "OCR this image to HTML, arranged as layout blocks.  Each layout block should be a div "
    "with the data-bbox attribute representing the bounding box of the block in "
    "[x0, y0, x1, y1] format.  Bboxes are normalized "
    f"0-{CHANDRA_BBOX_SCALE}. The data-label attribute is the label for the block.\n"
    "\n"
    "Use the following labels:\n"
    "- Caption\n- Footnote\n- Equation-Block\n- List-Group\n- Page-Header\n- Page-Footer\n"
    "- Image\n- Section-Header\n- Table\n- Text\n- Complex-Block\n- Code-Block\n- Form\n"
    "- Table-Of-Contents\n- Figure\n"
    "\n"
    f"Only use these tags {_CHANDRA_ALLOWED_TAGS}, and these attributes "
    f"{_CHANDRA_ALLOWED_ATTRIBUTES}.\n"
    "\n"
    "Guidelines:\n"
    "* Inline math: Surround math with <math>...</math> tags. Math expressions should be "
    "rendered in KaTeX-compatible LaTeX. Use display for block math.\n"
    "* Tables: Use colspan and rowspan attributes to match table structure.\n"
    "* Formatting: Maintain consistent formatting with the image, including spacing, "
    "indentation, subscripts/superscripts, and special characters.\n"
    "* Images: Include a description of any images in the alt attribute of an <img> tag. "
    "Do not fill out the src property.\n"
    "* Forms: Mark checkboxes and radio buttons properly.\n"
    "* Text: join lines together properly into paragraphs using <p>...</p> tags.  Use <br> "
    "tags for line breaks within paragraphs, but only when absolutely necessary to maintain "
    "meaning.\n"
    "* Use the simplest possible HTML structure that accurately represents the content of "
    "the block.\n"
    "* Make sure the text is accurate and easy for a human to read and interpret.  Reading "
    "order should be correct and natural."
)
"""chandra/prompts.py OCR_LAYOUT_PROMPT verbatim, with its `{bbox_scale}` filled in as
chandra/model/vllm.py does (the tag and attribute lists are Python list reprs there too)."""

CHANDRA_2 = ModelProfile(
    name="chandra-2",
    source=(
        "datalab-to/chandra (a6928a2, chandra-ocr 0.1.9): chandra/prompts.py "
        "OCR_LAYOUT_PROMPT; chandra/settings.py (IMAGE_DPI 192, MAX_OUTPUT_TOKENS 12384); "
        "chandra/model/util.py scale_to_fit (at most 3072x2048 px); chandra/model/vllm.py "
        "(image first, temperature 0 top_p 0.1, retries at 0.3 / 0.95); "
        "chandra/scripts/vllm.py (--max-num-seqs 32 --max-model-len 32768 "
        "--max_num_batched_tokens 65536); Chandra 2 boxes normalized 0-1000"
    ),
    prompt=CHANDRA_LAYOUT_PROMPT,
    prompt_version="chandra-ocr-layout-bbox1000",
    reply_format="chandra-html",
    max_tokens=12384,
    temperatures=(0.0, 0.3),
    top_p=(0.1, 0.95),
    max_context_tokens=32768,
    default_model="datalab-to/chandra-ocr-2",
    image=ImageRule(dpi=192, max_pixels=3072 * 2048),
    image_first=True,
    serve_args=("--max-num-seqs", "32", "--max-model-len", "32768",
                "--max-num-batched-tokens", "65536"),
    box_frame="normalized",
    box_scale=CHANDRA_BBOX_SCALE,
    aliases=("chandra",),
)

DOTS_LAYOUT_PROMPT = """Please output the layout information from the PDF image, including each layout element's bbox, its category, and the corresponding text content within the bbox.

1. Bbox format: [x1, y1, x2, y2]

2. Layout Categories: The possible categories are ['Caption', 'Footnote', 'Formula', 'List-item', 'Page-footer', 'Page-header', 'Picture', 'Section-header', 'Table', 'Text', 'Title'].

3. Text Extraction & Formatting Rules:
    - Picture: For the 'Picture' category, the text field should be omitted.
    - Formula: Format its text as LaTeX.
    - Table: Format its text as HTML.
    - All Others (Text, Title, etc.): Format their text as Markdown.

4. Constraints:
    - The output text must be the original text from the image, with no translation.
    - All layout elements must be sorted according to human reading order.

5. Final Output: The entire output must be a single JSON object.
"""
"""dots_ocr/utils/prompts.py `prompt_layout_all_en`, verbatim (its trailing newline too)."""

DOTS_IMAGE_TOKENS = "<|img|><|imgpad|><|endofimg|>"
"""dots_ocr/model/inference.py puts these before the prompt text, or vLLM adds a newline."""

DOTS_MOCR = ModelProfile(
    name="dots-mocr",
    source=(
        "rednote-hilab/dots.ocr (36d7248, rebranded dots.mocr): dots_ocr/utils/prompts.py "
        "prompt_layout_all_en; dots_ocr/model/inference.py (image first, "
        "<|img|><|imgpad|><|endofimg|> before the prompt); dots_ocr/parser.py (dpi 200, "
        "temperature 0.1, top_p 1.0, max_completion_tokens 16384); dots_ocr/utils/consts.py "
        "(MAX_PIXELS 11289600, IMAGE_FACTOR 28); README.md vllm serve "
        "(--trust-remote-code --chat-template-content-format string)"
    ),
    prompt=DOTS_IMAGE_TOKENS + DOTS_LAYOUT_PROMPT,
    prompt_version="dots-prompt-layout-all-en",
    reply_format="dots-json",
    max_tokens=16384,
    temperatures=(0.1, 0.2, 0.3, 0.5, 0.8, 0.9, 1.0),
    top_p=(1.0,),
    max_context_tokens=32768,  # 11,289,600 px / 28^2 = 14,400 image tokens + 16,384 out
    default_model="rednote-hilab/dots.mocr",
    image=ImageRule(dpi=200, max_pixels=11_289_600),
    image_first=True,
    serve_args=("--trust-remote-code", "--chat-template-content-format", "string"),
    box_frame="resized-pixels",
    aliases=("dots.mocr", "dots.ocr", "dots-mocr", "dotsocr"),
)

DEEPSEEK_OCR_PROMPT = "<|grounding|>Convert the document to markdown."
"""DeepSeek-OCR-vllm/config.py PROMPT without its leading `<image>\\n`: in a chat request the
image part is that placeholder (vLLM's DeepSeek-OCR chat template puts it first)."""

DEEPSEEK_NGRAM_PROCESSOR = "vllm.model_executor.models.deepseek_ocr:NGramPerReqLogitsProcessor"

DEEPSEEK_OCR = ModelProfile(
    name="deepseek-ocr",
    source=(
        "deepseek-ai/DeepSeek-OCR (e4ac34e): DeepSeek-OCR-master/DeepSeek-OCR-vllm/config.py "
        "PROMPT (grounding markdown), run_dpsk_ocr_pdf.py (144 dpi, temperature 0, "
        "max_tokens 8192, skip_special_tokens False, boxes /999); vllm-project/recipes "
        "models/deepseek-ai/DeepSeek-OCR.yaml (base_args, context_length 8192, vllm_xargs "
        "ngram_size 30 window_size 90 whitelist_token_ids [128821, 128822])"
    ),
    prompt=DEEPSEEK_OCR_PROMPT,
    prompt_version="deepseek-ocr-grounding-markdown",
    reply_format="deepseek-grounding",
    max_tokens=8192,
    temperatures=(0.0, *OLMOCR_TEMPERATURES[2:]),
    max_context_tokens=8192,
    default_model="deepseek-ai/DeepSeek-OCR",
    image=ImageRule(dpi=144),
    image_first=True,
    extra_fields={
        "skip_special_tokens": False,
        "vllm_xargs": {"ngram_size": 30, "window_size": 90,
                       "whitelist_token_ids": [128821, 128822]},
    },
    serve_args=("--trust-remote-code", "--logits-processors", DEEPSEEK_NGRAM_PROCESSOR,
                "--mm-processor-cache-gb", "0"),
    box_frame="normalized",
    box_scale=999,
    aliases=("deepseek-ocr",),
)

NANONETS_PROMPT = (
    "Extract the text from the above document as if you were reading it naturally. Return "
    "the tables in html format. Return the equations in LaTeX representation. If there is an "
    "image in the document and image caption is not present, add a small description of the "
    "image inside the <img></img> tag; otherwise, add the image caption inside <img></img>. "
    "Watermarks should be wrapped in brackets. Ex: <watermark>OFFICIAL COPY</watermark>. "
    "Page numbers should be wrapped in brackets. Ex: <page_number>14</page_number> or "
    "<page_number>9/22</page_number>. Prefer using ☐ and ☑ for check boxes."
)

NANONETS_OCR2 = ModelProfile(
    name="nanonets-ocr2",
    source=(
        "allenai/olmocr (f7cfe4c): olmocr/bench/runners/run_nanonetsocr_2.py (prompt, system "
        "message, image first, shortest side 1280 px, temperature 0); "
        "docling-project/docling (e1cb2b2): docling/datamodel/vlm_model_specs.py "
        "NANONETS_OCR2_VLLM_API (same prompt, max_tokens 15000)"
    ),
    prompt=NANONETS_PROMPT,
    prompt_version="nanonets-ocr2-markdown",
    reply_format="nanonets-markdown",
    max_tokens=15000,
    temperatures=(0.0, *OLMOCR_TEMPERATURES[2:]),
    max_context_tokens=32768,  # ~2,700 image tokens for a letter page + 15,000 out
    default_model="nanonets/Nanonets-OCR2-3B",
    image=ImageRule(shortest_side=1280),
    image_first=True,
    system_prompt="You are a helpful assistant.",
    aliases=("nanonets",),
)

GRANITE_DOCLING = ModelProfile(
    name="granite-docling",
    source=(
        "docling-project/docling (e1cb2b2): docling/datamodel/vlm_model_specs.py "
        "GRANITEDOCLING_VLLM_API (prompt, scale 2.0, temperature 0, max_tokens 4096, "
        "stop </doctag> and <|end_of_text|>) and GRANITEDOCLING_TRANSFORMERS "
        "(skip_special_tokens False, so no DocTags token can be dropped; max_new_tokens "
        "8192 as the context bound); docling-core DocTags (<loc_N> on a 500 grid)"
    ),
    prompt="Convert this page to docling.",
    prompt_version="granite-docling-doctags",
    reply_format="doctags",
    max_tokens=4096,
    temperatures=(0.0, *OLMOCR_TEMPERATURES[2:]),
    max_context_tokens=8192,
    default_model="ibm-granite/granite-docling-258M",
    image=ImageRule(dpi=144),
    image_first=True,
    extra_fields={"skip_special_tokens": False, "stop": ["</doctag>", "<|end_of_text|>"]},
    box_frame="normalized",
    box_scale=500,
    aliases=("granite-docling",),
)

QWEN3_VL_MARKDOWN = ModelProfile(
    name="qwen3-vl",
    source=(
        "docling-project/docling (e1cb2b2): docling/datamodel/vlm_model_specs.py markdown "
        "prompt of its Qwen and granite-vision specs (scale 2.0, temperature 0); "
        "vllm-project/recipes Qwen/Qwen3-VL.md (--mm-encoder-tp-mode data "
        "--async-scheduling; video off as in VllmSettings' default); "
        "--mm-processor-cache-gb 0 as every OCR recipe sets it for unique page images"
    ),
    prompt=("Convert this page to markdown. Do not miss any text and only output the bare "
            "markdown!"),
    prompt_version="docling-markdown",
    reply_format="markdown",
    max_tokens=8000,
    temperatures=(0.0, *OLMOCR_TEMPERATURES[2:]),
    max_context_tokens=16384,
    default_model="Qwen/Qwen3-VL-8B-Instruct",
    image=ImageRule(dpi=144),
    image_first=True,
    serve_args=("--mm-encoder-tp-mode", "data", "--async-scheduling",
                "--mm-processor-cache-gb", "0"),
    aliases=("qwen3-vl",),
)

PROFILES: Mapping[str, ModelProfile] = types.MappingProxyType({
    p.name: p for p in (OLMOCR_2, CHANDRA_2, DOTS_MOCR, DEEPSEEK_OCR, NANONETS_OCR2,
                        GRANITE_DOCLING, QWEN3_VL_MARKDOWN)
})
"""Every known profile by name; read-only so no caller can swap a profile at runtime."""

DEFAULT_PROFILE = OLMOCR_2.name


def get_profile(name: str) -> ModelProfile:
    """The profile called `name`; a typo fails loudly with the names that do exist."""
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise ValueError(f"unknown model profile {name!r}; known profiles: {known}") from None


def _named_by(model: str) -> list[str]:
    lowered = model.lower()
    return sorted(p.name for p in PROFILES.values() if any(a in lowered for a in p.aliases))


def infer_profile(model: str) -> str | None:
    """The one profile whose aliases `model` names (a Hugging Face id or served name).

    None when no profile matches or more than one does: the caller then asks for
    `--profile` rather than guess.
    """
    matches = _named_by(model)
    return matches[0] if len(matches) == 1 else None


def choose_profile(profile: str | None, model: str | None) -> str:
    """`profile` when given, else the one `model` names, else the default (olmOCR-2).

    A model that names no profile (a served name such as "olmocr" or "model") gets the
    default; one that names several is an error, so no run guesses its parser.
    """
    if profile:
        return get_profile(profile).name
    matches = _named_by(model) if model else []
    if len(matches) > 1:
        raise ValueError(f"model {model!r} matches several profiles ({', '.join(matches)}); "
                         "choose one with --profile")
    return matches[0] if matches else DEFAULT_PROFILE
