"""Reply parsers, one per format: each turns a model's reply into the page's markdown
text and, where the model gives them, its layout blocks. Pure functions.

`parse_reply(profile, text, image_size)` picks the parser by the profile's
`reply_format`. A reply a parser cannot read raises ReplyParseError: the page path counts
it as a failed attempt and retries, as it does for olmOCR's front matter.

The Dolma text stays clean markdown: page headers, footers, page numbers and watermarks
are left out of it (olmOCR-2 is trained to leave them out, and Chandra's own
`parse_markdown` drops headers and footers by default), while the layout keeps every
block the model reported.

Why one long module: the parsers are siblings with one signature and one dispatch
table; side by side, a reviewer sees that each format makes the same decisions (what
counts as malformed, what stays out of the text) the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from html.parser import HTMLParser
from typing import Any

from pagegate.errors import ReplyParseError
from pagegate.vlm.layout import LayoutBlock, box_fractions, smart_resize
from pagegate.vlm.profiles import ModelProfile
from pagegate.vlm.reply import PageReply, parse_reply_text, plain_reply

ImageSize = tuple[int, int]
"""(width, height) in pixels of the image the request carried."""

_MARGIN_LABELS = frozenset({"page-header", "page-footer", "page_header", "page_footer",
                            "header", "footer", "page-number", "page_number"})


def _in_text(category: str) -> bool:
    return category.lower() not in _MARGIN_LABELS


def _join(parts: Sequence[str]) -> str:
    return "\n\n".join(p for p in (s.strip() for s in parts) if p)


def _peek(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


# --- Chandra: HTML layout blocks -------------------------------------------------------

_HEADINGS = {"h1": "# ", "h2": "## ", "h3": "### ", "h4": "#### ", "h5": "##### "}
_EMPHASIS = {"b": "**", "strong": "**", "i": "*"}
_VOID = frozenset({"br", "img", "input", "hr"})


class _ChandraHtml(HTMLParser):
    """Top-level `<div data-bbox data-label>` blocks, each one's HTML turned to markdown.

    Tables stay HTML (markdown allows it, and olmOCR asks for HTML tables too); math
    becomes `$...$`, or `$$...$$` with `display`; an image becomes its alt text.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[tuple[str, str, list[str]]] = []  # label, raw bbox, markdown parts
        self.depth = 0
        self.stray = ""
        self.table_depth = 0

    def _out(self, piece: str) -> None:
        if self.depth == 0 or not self.blocks:
            self.stray += piece
        else:
            self.blocks[-1][2].append(piece)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "div" and self.depth == 0:
            if "data-bbox" not in a:
                raise ReplyParseError("a top-level block has no data-bbox")
            self.blocks.append((a.get("data-label", "Text"), a["data-bbox"], []))
        if tag not in _VOID:
            self.depth += 1
        if self.table_depth or tag == "table":
            self.table_depth += tag == "table"
            self._out(self.get_starttag_text() or f"<{tag}>")
            return
        if tag in _HEADINGS:
            self._out("\n\n" + _HEADINGS[tag])
        elif tag in ("p", "div", "ul", "ol", "pre"):
            self._out("\n\n")
        elif tag == "li":
            self._out("\n- ")
        elif tag == "br":
            self._out("\n")
        elif tag in _EMPHASIS:
            self._out(_EMPHASIS[tag])
        elif tag == "math":
            self._out("$$" if "display" in a else "$")
        elif tag == "img":
            self._out(f"![{a.get('alt', '')}]()")
        elif tag == "input" and a.get("type") in ("checkbox", "radio"):
            self._out("☑ " if "checked" in a else "☐ ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID:
            return
        if self.depth == 0:
            raise ReplyParseError(f"closing </{tag}> without an opening tag")
        if self.table_depth:
            self._out(f"</{tag}>")
            self.table_depth -= tag == "table"
        elif tag in _EMPHASIS:
            self._out(_EMPHASIS[tag])
        elif tag == "math":
            last = self.blocks[-1][2] if self.blocks else []
            opened = next((p for p in reversed(last) if p in ("$", "$$")), "$")
            self._out(opened)
        elif tag in _HEADINGS or tag in ("p", "div", "ul", "ol", "pre"):
            self._out("\n\n")
        self.depth -= 1

    def handle_data(self, data: str) -> None:
        self._out(data)


def parse_chandra_html(text: str, image_size: ImageSize, *, box_scale: int) -> PageReply:
    """Chandra's `ocr_layout` reply: a sequence of `<div data-bbox="[x0, y0, x1, y1]"
    data-label="...">` blocks, boxes on a 0..box_scale grid (chandra/output.py parse_layout)."""
    parser = _ChandraHtml()
    try:
        parser.feed(text)
        parser.close()
    except ReplyParseError:
        raise
    except Exception as exc:  # HTMLParser raises little, but never let it escape as a crash
        raise ReplyParseError(f"reply is not readable HTML: {exc}") from None
    if parser.depth != 0:
        raise ReplyParseError("reply ends inside an open HTML element (truncated?)")
    if parser.stray.strip():
        raise ReplyParseError(f"text outside the layout blocks: {_peek(parser.stray.strip())}")
    if not parser.blocks and text.strip():
        raise ReplyParseError(f"no layout blocks in the reply: {_peek(text.strip())}")
    blocks = []
    for label, raw_box, parts in parser.blocks:
        try:
            coords = json.loads(raw_box)
        except ValueError:
            raise ReplyParseError(f"data-bbox is not a list of numbers: {_peek(raw_box)}") from None
        body = re.sub(r"\n{3,}", "\n\n", "".join(parts)).strip()
        blocks.append(LayoutBlock(label, box_fractions(coords, box_scale, box_scale), body))
    return plain_reply(_join([b.text for b in blocks if _in_text(b.category)]), tuple(blocks))


# --- dots.mocr: JSON layout cells ------------------------------------------------------


def parse_dots_json(text: str, image_size: ImageSize) -> PageReply:
    """dots.mocr's `prompt_layout_all_en` reply: a JSON list of cells, each with `bbox`
    (pixels of the image as the model's processor resized it), `category` and `text`
    (absent for a Picture). Formulas are LaTeX and become `$$` blocks."""
    try:
        cells = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReplyParseError(f"reply is not JSON ({exc.msg} at {exc.pos})") from None
    if isinstance(cells, dict):  # "a single JSON object": accept one wrapping the list
        lists = [v for v in cells.values() if isinstance(v, list)]
        cells = lists[0] if len(lists) == 1 else cells
    if not isinstance(cells, list):
        raise ReplyParseError("reply must be a JSON list of layout cells")
    height, width = smart_resize(image_size[1], image_size[0])
    blocks = []
    for i, cell in enumerate(cells):
        if not isinstance(cell, dict) or not isinstance(cell.get("category"), str):
            raise ReplyParseError(f"cell {i} is not an object with a category")
        body = cell.get("text", "")
        if not isinstance(body, str):
            raise ReplyParseError(f"cell {i}: text must be a string")
        body = body.strip()
        if cell["category"] == "Formula" and body and not body.startswith("$"):
            body = f"$$\n{body}\n$$"
        box = box_fractions(cell.get("bbox", ()), width, height)
        blocks.append(LayoutBlock(cell["category"], box, body))
    return plain_reply(_join([b.text for b in blocks if _in_text(b.category)]), tuple(blocks))


# --- DeepSeek-OCR: markdown with grounding tags ----------------------------------------

_GROUNDING = re.compile(r"<\|ref\|>(.*?)<\|/ref\|><\|det\|>(.*?)<\|/det\|>", re.DOTALL)
_DEEPSEEK_END = "<｜end▁of▁sentence｜>"


def parse_deepseek_grounding(text: str, image_size: ImageSize, *, box_scale: int) -> PageReply:
    """DeepSeek-OCR's grounding markdown: each block opens with
    `<|ref|>label<|/ref|><|det|>[[x0, y0, x1, y1]]<|/det|>` (boxes on a 0..999 grid,
    run_dpsk_ocr_pdf.py) and its markdown follows up to the next tag. The tags are
    stripped from the text; an image block keeps no text."""
    text = text.replace(_DEEPSEEK_END, "")
    matches = list(_GROUNDING.finditer(text))
    rest = _GROUNDING.sub("", text)
    if any(tag in rest for tag in ("<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>")):
        raise ReplyParseError("a grounding tag is not closed (truncated reply?)")
    if not matches:
        return plain_reply(text.strip())
    blocks = []
    kept = [text[: matches[0].start()]]
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        label = m.group(1).strip()
        body = "" if label == "image" else text[m.end():end].strip()
        try:
            boxes = json.loads(m.group(2))
        except ValueError:
            raise ReplyParseError(f"det is not a list of boxes: {_peek(m.group(2))}") from None
        if not isinstance(boxes, list) or not boxes:
            raise ReplyParseError(f"det is not a list of boxes: {_peek(m.group(2))}")
        for box in boxes if isinstance(boxes[0], list) else [boxes]:
            blocks.append(LayoutBlock(label, box_fractions(box, box_scale, box_scale), body))
        if _in_text(label):
            kept.append(body)
    return plain_reply(_join(kept), tuple(blocks))


# --- Nanonets-OCR2: markdown with semantic tags ----------------------------------------

_NANONETS_TAGS = ("img", "watermark", "page_number")
_NANONETS_TAG = re.compile(r"<(img|watermark|page_number)>(.*?)</\1>", re.DOTALL)


def parse_nanonets_markdown(text: str, image_size: ImageSize) -> PageReply:
    """Nanonets-OCR2's markdown: `<img>description</img>` becomes `![description]()`,
    `<watermark>` and `<page_number>` are dropped from the text; tables stay HTML."""
    def replace(m: re.Match[str]) -> str:
        return f"![{m.group(2).strip()}]()" if m.group(1) == "img" else ""

    cleaned = _NANONETS_TAG.sub(replace, text)
    for tag in _NANONETS_TAGS:
        if f"<{tag}>" in cleaned or f"</{tag}>" in cleaned:
            raise ReplyParseError(f"<{tag}> is not closed (truncated reply?)")
    return plain_reply(re.sub(r"\n{3,}", "\n\n", cleaned).strip())


# --- granite-docling: DocTags ----------------------------------------------------------

_ELEMENT = re.compile(r"<([a-z_0-9]+)>(.*?)</\1>", re.DOTALL)
_LOC = re.compile(r"<loc_(\d+)>")
_LEADING_LOCS = re.compile(r"\s*" + r"<loc_(\d+)>" * 4)
_CONTAINERS = frozenset({"ordered_list", "unordered_list", "picture", "chart", "group",
                         "inline", "key_value_region", "form"})
_OTSL_CELL = re.compile(r"<(fcel|ecel|lcel|ucel|xcel|ched|rhed|srow|nl)>")


def _otsl_markdown(body: str) -> str:
    """An OTSL table (docling-core's TableToken cells, <nl> ends a row) as a markdown table."""
    rows: list[list[str]] = [[]]
    pieces = _OTSL_CELL.split(body)
    i = 1
    while i < len(pieces):
        tag, content = pieces[i], pieces[i + 1] if i + 1 < len(pieces) else ""
        if tag == "nl":
            rows.append([])
        elif tag in ("fcel", "ecel", "ched", "rhed", "srow"):
            rows[-1].append(content.strip())
        else:  # a spanned cell repeats nothing
            rows[-1].append("")
        i += 2
    rows = [r for r in rows if r]
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    rows = [r + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * width]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def _doctags_elements(body: str, box_scale: int, blocks: list[LayoutBlock], md: list[str]) -> None:
    rest = _ELEMENT.sub("", body)
    rest = _LOC.sub("", rest).strip()
    if rest:
        raise ReplyParseError(f"DocTags text outside any element: {_peek(rest)}")
    for m in _ELEMENT.finditer(body):
        tag, inner = m.group(1), m.group(2)
        lead = _LEADING_LOCS.match(inner)
        locs = [int(v) for v in lead.groups()] if lead else []
        children = inner[lead.end():] if lead else inner
        content = _LOC.sub("", children)
        if tag in _CONTAINERS:
            if len(locs) == 4:
                blocks.append(LayoutBlock(tag, box_fractions(locs, box_scale, box_scale), ""))
            _doctags_elements(children, box_scale, blocks, md)
            continue
        text = _otsl_markdown(content) if tag == "otsl" else re.sub(r"<[^>]+>", "", content).strip()
        if len(locs) == 4:
            blocks.append(LayoutBlock(tag, box_fractions(locs, box_scale, box_scale), text))
        if not _in_text(tag) or not text:
            continue
        if tag == "title":
            md.append("# " + text)
        elif tag.startswith("section_header_level_"):
            level = int(tag.rsplit("_", 1)[1]) if tag[-1].isdigit() else 1
            md.append("#" * min(6, level + 1) + " " + text)
        elif tag == "list_item":
            md.append("- " + text)
        elif tag == "formula":
            md.append(f"$$\n{text}\n$$")
        elif tag == "code":
            md.append(f"```\n{text}\n```")
        else:
            md.append(text)


def parse_doctags(text: str, image_size: ImageSize, *, box_scale: int) -> PageReply:
    """granite-docling's DocTags: elements such as `<text><loc_x0><loc_y0><loc_x1><loc_y1>
    ...</text>` inside `<doctag>`, locations on a 0..500 grid (docling-core's
    DocumentToken.get_location). The stop string `</doctag>` may cut the closing tag."""
    body = text.replace("<|end_of_text|>", "").strip()
    body = body.removeprefix("<doctag>").removesuffix("</doctag>")
    blocks: list[LayoutBlock] = []
    md: list[str] = []
    _doctags_elements(body, box_scale, blocks, md)
    return plain_reply(_join(md), tuple(blocks))


# --- plain markdown (Qwen3-VL) ---------------------------------------------------------

_FENCE = re.compile(r"^```(?:markdown|md)?[ \t]*\n(.*?)\n```[ \t]*$", re.DOTALL)


def parse_markdown(text: str, image_size: ImageSize) -> PageReply:
    """A markdown reply; one ```markdown fence around the whole reply is taken off, and a
    fence opened but never closed is a truncated reply."""
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        return plain_reply(fenced.group(1).strip())
    if stripped.count("```") % 2:
        raise ReplyParseError("a ``` code fence is not closed (truncated reply?)")
    return plain_reply(stripped)


def _front_matter(text: str, image_size: ImageSize) -> PageReply:
    return parse_reply_text(text)


_PARSERS: dict[str, Callable[[ModelProfile, str, ImageSize], PageReply]] = {
    "yaml-front-matter": lambda p, t, s: _front_matter(t, s),
    "chandra-html": lambda p, t, s: parse_chandra_html(t, s, box_scale=p.box_scale),
    "dots-json": lambda p, t, s: parse_dots_json(t, s),
    "deepseek-grounding": lambda p, t, s: parse_deepseek_grounding(t, s, box_scale=p.box_scale),
    "nanonets-markdown": lambda p, t, s: parse_nanonets_markdown(t, s),
    "doctags": lambda p, t, s: parse_doctags(t, s, box_scale=p.box_scale),
    "markdown": lambda p, t, s: parse_markdown(t, s),
}


def parse_reply(profile: ModelProfile, text: Any, image_size: ImageSize) -> PageReply:
    """The reply of `profile`'s model, parsed by its format's parser."""
    if not isinstance(text, str):
        raise ReplyParseError(f"reply content must be a string, not {type(text).__name__}")
    return _PARSERS[profile.reply_format](profile, text, image_size)
