"""What each model's reply looks like, written by the simulator from a page's text lines.

The simulator answers a request in the format of the profile that sent it, recognised by
its prompt (each profile's prompt is verbatim, pagegate.vlm.profiles), so one simulator
serves every profile. Each writer below produces what its model's own client parses,
and pagegate's parser for that format (pagegate.vlm.formats) reads it back; boxes sit on
the lines' real places, in the model's own frame. The shapes come from the sources the
profiles and parsers cite:

| format | shape | boxes |
|---|---|---|
| yaml-front-matter | olmOCR's front matter, then the text (olmocr `prompts.py`, PageResponse) | none |
| chandra-html | `<div data-bbox="[x0, y0, x1, y1]" data-label="Text"><p>...</p></div>` per block (chandra `output.py` parse_layout) | 0..1000 grid |
| dots-json | one JSON list of `{"bbox", "category", "text"}` cells (dots `prompts.py` prompt_layout_all_en) | pixels of the image after smart_resize |
| deepseek-grounding | `<\\|ref\\|>text<\\|/ref\\|><\\|det\\|>[[x0, y0, x1, y1]]<\\|/det\\|>` then the block's markdown, ending in the model's end-of-sentence token (DeepSeek-OCR `run_dpsk_ocr_pdf.py`; `skip_special_tokens` is false) | 0..999 grid |
| nanonets-markdown | markdown, page number in `<page_number>` (olmocr `run_nanonetsocr_2.py` prompt) | none |
| doctags | `<doctag><text><loc_x0><loc_y0><loc_x1><loc_y1>...</text>...` (docling-core DocTags); vLLM leaves the stop string `</doctag>` out | 0..500 grid |
| markdown | markdown in one ```markdown fence, as Qwen3-VL often answers | none |

`malformed_reply` gives, per format, a reply its parser must refuse (a model that lost
its way): the simulator's `--garbage-below-temperature` fault and `--malformed-pages`.
Pure functions.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence

from pagegate.sim.pages import TextLine
from pagegate.vlm.layout import smart_resize
from pagegate.vlm.profiles import DEFAULT_PROFILE, PROFILES, ModelProfile
from pagegate.vlm.reply import PageReply, format_reply_text

ImageSize = tuple[int, int]
DEEPSEEK_END = "<｜end▁of▁sentence｜>"
"""DeepSeek-OCR's end-of-sentence token, kept in the text with skip_special_tokens false."""


def profile_of(prompts: Sequence[str]) -> ModelProfile:
    """The profile whose prompt the request carries; olmOCR-2's when none does (a client
    of the simulator's own, or a prompt of a version pagegate does not know)."""
    for profile in PROFILES.values():
        if profile.prompt in prompts:
            return profile
    return PROFILES[DEFAULT_PROFILE]


def _grid(profile: ModelProfile, box: tuple[float, float, float, float],
          image_size: ImageSize) -> list[int]:
    """A box of page fractions in the profile's own frame."""
    if profile.box_frame == "resized-pixels":
        height, width = smart_resize(image_size[1], image_size[0])
        sx, sy = width, height
    else:
        sx = sy = profile.box_scale
    x0, y0, x1, y1 = box
    return [round(x0 * sx), round(y0 * sy), round(x1 * sx), round(y1 * sy)]


def _plain(lines: Sequence[TextLine]) -> str:
    return "\n".join(line.text for line in lines)


def olmocr_reply(text: str, rotation_correction: int = 0) -> str:
    """olmOCR's front matter and text; a correction other than 0 says the page is turned."""
    reply = PageReply(primary_language="en", is_rotation_valid=rotation_correction == 0,
                      rotation_correction=rotation_correction, is_table=False,
                      is_diagram=False, text=text)
    return format_reply_text(reply)


def _olmocr(p: ModelProfile, lines: Sequence[TextLine], size: ImageSize, page: int) -> str:
    return olmocr_reply(_plain(lines))


def _chandra(p: ModelProfile, lines: Sequence[TextLine], size: ImageSize, page: int) -> str:
    return "".join(
        f'<div data-bbox="{_grid(p, line.box, size)}" data-label="Text">'
        f"<p>{html.escape(line.text, quote=False)}</p></div>"
        for line in lines
    )


def _dots(p: ModelProfile, lines: Sequence[TextLine], size: ImageSize, page: int) -> str:
    cells = [{"bbox": _grid(p, line.box, size), "category": "Text", "text": line.text}
             for line in lines]
    return json.dumps(cells, ensure_ascii=False)


def _deepseek(p: ModelProfile, lines: Sequence[TextLine], size: ImageSize, page: int) -> str:
    blocks = [f"<|ref|>text<|/ref|><|det|>[{_grid(p, line.box, size)}]<|/det|>\n{line.text}"
              for line in lines]
    return "\n\n".join(blocks) + DEEPSEEK_END


def _nanonets(p: ModelProfile, lines: Sequence[TextLine], size: ImageSize, page: int) -> str:
    return f"{_plain(lines)}\n\n<page_number>{page}</page_number>"


def _doctags(p: ModelProfile, lines: Sequence[TextLine], size: ImageSize, page: int) -> str:
    def element(line: TextLine) -> str:
        locs = "".join(f"<loc_{v}>" for v in _grid(p, line.box, size))
        return f"<text>{locs}{line.text.replace('<', ' ').replace('>', ' ')}</text>"

    return "<doctag>" + "\n".join(element(line) for line in lines) + "\n</doctag>"


def _markdown(p: ModelProfile, lines: Sequence[TextLine], size: ImageSize, page: int) -> str:
    return f"```markdown\n{_plain(lines)}\n```"


_WRITERS: dict[str, Callable[[ModelProfile, Sequence[TextLine], ImageSize, int], str]] = {
    "yaml-front-matter": _olmocr,
    "chandra-html": _chandra,
    "dots-json": _dots,
    "deepseek-grounding": _deepseek,
    "nanonets-markdown": _nanonets,
    "doctags": _doctags,
    "markdown": _markdown,
}

_MALFORMED: dict[str, Callable[[str], str]] = {
    "yaml-front-matter": lambda good: good.split("---", 2)[-1].strip(),  # no front matter
    "chandra-html": lambda good: "I cannot read the layout of this page.",  # no blocks
    "dots-json": lambda good: good[:-1],  # the list never closes
    "deepseek-grounding": lambda good: "<|ref|>text<|/ref|><|det|>[[0, 0",  # an open tag
    "nanonets-markdown": lambda good: good + "\n<img>a figure",  # an open <img>
    "doctags": lambda good: "I cannot convert this page.",  # text outside any element
    "markdown": lambda good: good.removesuffix("```"),  # the fence never closes
}


def write_reply(profile: ModelProfile, lines: Sequence[TextLine], image_size: ImageSize,
                page_number: int = 1) -> str:
    """The reply `profile`'s model gives for a page with these lines."""
    return _WRITERS[profile.reply_format](profile, lines, image_size, page_number)


def malformed_reply(profile: ModelProfile, lines: Sequence[TextLine], image_size: ImageSize,
                    page_number: int = 1) -> str:
    """A reply in `profile`'s format that its parser refuses."""
    good = write_reply(profile, lines, image_size, page_number)
    return _MALFORMED[profile.reply_format](good)


def cut_reply(text: str) -> str:
    """A reply that ran out of tokens: its first half (vLLM sends what was generated)."""
    return text[: max(1, len(text) // 2)]


def apply_stop(text: str, stop: Sequence[str]) -> str:
    """The text up to the first stop string, which vLLM leaves out of the reply
    (SamplingParams.include_stop_str_in_output is false by default)."""
    cuts = [text.find(s) for s in stop if s and s in text]
    return text[: min(cuts)] if cuts else text
