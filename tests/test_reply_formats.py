"""Reply parsers, one table per format: replies written the way each model documents its
output, the markdown and blocks they give, and malformed replies that must fail (a failed
attempt, retried like an olmOCR reply without front matter)."""

from __future__ import annotations

import json

import pytest

from pagegate.errors import ReplyParseError
from pagegate.vlm.chat import parse_chat_response
from pagegate.vlm.formats import parse_reply
from pagegate.vlm.layout import LayoutBlock, block_in_points, box_fractions, smart_resize
from pagegate.vlm.profiles import get_profile

SIZE = (1000, 1400)  # the sent image's (width, height)


def parsed(profile: str, text: str, size: tuple[int, int] = SIZE) -> tuple[str, list[tuple[str, tuple[float, ...], str]]]:
    reply = parse_reply(get_profile(profile), text, size)
    assert (reply.is_rotation_valid, reply.rotation_correction) == (True, 0)
    return reply.text, [(b.category, tuple(round(v, 4) for v in b.box), b.text) for b in reply.blocks]


# --- Chandra ------------------------------------------------------------------------

CHANDRA = (
    '<div data-bbox="[50, 20, 950, 60]" data-label="Page-Header"><p>ACME Report</p></div>'
    '<div data-bbox="[100, 100, 900, 150]" data-label="Section-Header"><h1>Results</h1></div>'
    '<div data-bbox="[100, 200, 900, 400]" data-label="Text"><p>Revenue <b>grew</b> by '
    '<math>x^2</math>.<br>Next line.</p></div>'
    '<div data-bbox="[100, 450, 900, 600]" data-label="Table"><table><tr><td>a</td>'
    '<td colspan="2">b</td></tr></table></div>'
    '<div data-bbox="[100, 650, 500, 800]" data-label="Image"><img alt="A bar chart"/></div>'
    '<div data-bbox="[100, 850, 900, 900]" data-label="Form"><input type="checkbox" checked> '
    'Agree</div>'
)


def test_chandra_layout_blocks_become_markdown_and_boxes() -> None:
    text, blocks = parsed("chandra-2", CHANDRA)
    assert text == (
        "# Results\n\nRevenue **grew** by $x^2$.\nNext line.\n\n"
        '<table><tr><td>a</td><td colspan="2">b</td></tr></table>\n\n'
        "![A bar chart]()\n\n☑  Agree"
    )
    assert [b[0] for b in blocks] == ["Page-Header", "Section-Header", "Text", "Table", "Image",
                                      "Form"]
    assert blocks[0] == ("Page-Header", (0.05, 0.02, 0.95, 0.06), "ACME Report")
    assert blocks[2][1] == (0.1, 0.2, 0.9, 0.4)


def test_chandra_display_math() -> None:
    text, _ = parsed("chandra-2", '<div data-bbox="[0,0,1000,1000]" data-label="Equation-Block">'
                                  '<math display="block">E=mc^2</math></div>')
    assert text == "$$E=mc^2$$"


@pytest.mark.parametrize(("reply", "says"), [
    ("Just some text, no blocks", "outside the layout blocks"),
    ('<div data-label="Text">no box</div>', "no data-bbox"),
    ('<div data-bbox="[1, 2, 3]" data-label="Text">x</div>', "four numbers"),
    ('<div data-bbox="left" data-label="Text">x</div>', "not a list of numbers"),
    ('<div data-bbox="[1, 2, 3, 4]" data-label="Text"><p>cut off', "open HTML element"),
    ('<div data-bbox="[1,2,3,4]">a</div></div>', "without an opening"),
])
def test_chandra_malformed(reply: str, says: str) -> None:
    with pytest.raises(ReplyParseError, match=says):
        parse_reply(get_profile("chandra-2"), reply, SIZE)


# --- dots.mocr ------------------------------------------------------------------------


def test_dots_cells_in_resized_pixels() -> None:
    height, width = smart_resize(SIZE[1], SIZE[0])
    assert (width, height) == (1008, 1400)  # multiples of 28 nearest the image
    cells = [
        {"bbox": [0, 0, 1008, 70], "category": "Page-header", "text": "Journal 12"},
        {"bbox": [100, 140, 908, 210], "category": "Title", "text": "# A Title"},
        {"bbox": [100, 280, 908, 560], "category": "Text", "text": "Body **text**."},
        {"bbox": [100, 600, 908, 700], "category": "Formula", "text": "a+b=c"},
        {"bbox": [100, 700, 500, 900], "category": "Picture"},
        {"bbox": [100, 900, 908, 1100], "category": "Table", "text": "<table><tr><td>1</td></tr></table>"},
    ]
    text, blocks = parsed("dots-mocr", json.dumps(cells))
    assert text == ("# A Title\n\nBody **text**.\n\n$$\na+b=c\n$$\n\n"
                    "<table><tr><td>1</td></tr></table>")
    assert blocks[0] == ("Page-header", (0.0, 0.0, 1.0, 0.05), "Journal 12")
    assert blocks[4] == ("Picture", (round(100 / 1008, 4), 0.5, round(500 / 1008, 4),
                                     round(900 / 1400, 4)), "")


def test_dots_accepts_one_object_wrapping_the_cells() -> None:
    text, _ = parsed("dots-mocr", json.dumps({"cells": [
        {"bbox": [0, 0, 10, 10], "category": "Text", "text": "x"}]}))
    assert text == "x"


@pytest.mark.parametrize(("reply", "says"), [
    ('[{"bbox": [0, 0, 10, 10], "category": "Text", "text": "cut', "not JSON"),
    ('{"a": 1}', "JSON list"),
    ('[{"bbox": [0, 0, 10, 10], "text": "x"}]', "category"),
    ('[{"bbox": [0, 0, 10], "category": "Text", "text": "x"}]', "four numbers"),
    ('[{"category": "Text", "text": "x"}]', "four numbers"),
    ('[{"bbox": [0, 0, 1, 1], "category": "Text", "text": 5}]', "text must be a string"),
])
def test_dots_malformed(reply: str, says: str) -> None:
    with pytest.raises(ReplyParseError, match=says):
        parse_reply(get_profile("dots-mocr"), reply, SIZE)


# --- DeepSeek-OCR ---------------------------------------------------------------------

DEEPSEEK = (
    "<|ref|>title<|/ref|><|det|>[[99, 49, 899, 99]]<|/det|>\n# Annual Report\n\n"
    "<|ref|>text<|/ref|><|det|>[[99, 149, 899, 449]]<|/det|>\nSales rose.\n\n"
    "<|ref|>image<|/ref|><|det|>[[99, 499, 499, 799], [549, 499, 899, 799]]<|/det|>\n\n"
    "<|ref|>page_footer<|/ref|><|det|>[[450, 950, 550, 980]]<|/det|>\n7\n"
    "<｜end▁of▁sentence｜>"
)


def test_deepseek_grounding_tags_are_stripped_and_boxes_kept() -> None:
    text, blocks = parsed("deepseek-ocr", DEEPSEEK)
    assert text == "# Annual Report\n\nSales rose."
    assert [b[0] for b in blocks] == ["title", "text", "image", "image", "page_footer"]
    assert blocks[0] == ("title", (round(99 / 999, 4), round(49 / 999, 4), round(899 / 999, 4),
                                   round(99 / 999, 4)), "# Annual Report")


def test_deepseek_without_grounding_is_plain_markdown() -> None:
    assert parsed("deepseek-ocr", "Free text\n\n| a | b |") == ("Free text\n\n| a | b |", [])


@pytest.mark.parametrize(("reply", "says"), [
    ("<|ref|>text<|/ref|><|det|>[[1, 2, 3, 4]]", "not closed"),
    ("<|ref|>text<|/ref|><|det|>[[1, 2, 3]]<|/det|>\nx", "four numbers"),
    ("<|ref|>text<|/ref|><|det|>oops<|/det|>\nx", "not a list of boxes"),
])
def test_deepseek_malformed(reply: str, says: str) -> None:
    with pytest.raises(ReplyParseError, match=says):
        parse_reply(get_profile("deepseek-ocr"), reply, SIZE)


# --- Nanonets-OCR2 --------------------------------------------------------------------

NANONETS = (
    "<watermark>OFFICIAL COPY</watermark>\n# Invoice\n\n☐ Paid ☑ Due\n\n"
    "<img>A company logo</img>\n\n<table><tr><td>1</td></tr></table>\n\n"
    "<page_number>9/22</page_number>"
)


def test_nanonets_tags_become_clean_markdown() -> None:
    assert parsed("nanonets-ocr2", NANONETS) == (
        "# Invoice\n\n☐ Paid ☑ Due\n\n![A company logo]()\n\n<table><tr><td>1</td></tr></table>",
        [])


@pytest.mark.parametrize("reply", ["text <page_number>14", "<img>a logo", "x </watermark>"])
def test_nanonets_malformed(reply: str) -> None:
    with pytest.raises(ReplyParseError, match="not closed"):
        parse_reply(get_profile("nanonets-ocr2"), reply, SIZE)


# --- granite-docling (DocTags) --------------------------------------------------------

DOCTAGS = (
    "<doctag><page_header><loc_25><loc_10><loc_475><loc_20>Journal</page_header>"
    "<title><loc_50><loc_50><loc_450><loc_75>Granite Results</title>"
    "<section_header_level_1><loc_50><loc_90><loc_450><loc_100>Intro</section_header_level_1>"
    "<text><loc_50><loc_110><loc_450><loc_200>Docling reads pages.</text>"
    "<unordered_list><list_item><loc_60><loc_210><loc_450><loc_220>one</list_item>"
    "<list_item><loc_60><loc_220><loc_450><loc_230>two</list_item></unordered_list>"
    "<otsl><loc_50><loc_240><loc_450><loc_300><ched>A<ched>B<nl><fcel>1<ecel><nl></otsl>"
    "<formula><loc_50><loc_310><loc_450><loc_330>E=mc^2</formula>"
    "<page_footer><loc_240><loc_480><loc_260><loc_490>3</page_footer>"
)


def test_doctags_become_markdown_and_boxes_on_the_500_grid() -> None:
    text, blocks = parsed("granite-docling", DOCTAGS + "</doctag>")
    assert text == ("# Granite Results\n\n## Intro\n\nDocling reads pages.\n\n- one\n\n- two\n\n"
                    "| A | B |\n|---|---|\n| 1 |  |\n\n$$\nE=mc^2\n$$")
    assert blocks[0] == ("page_header", (0.05, 0.02, 0.95, 0.04), "Journal")
    assert blocks[1] == ("title", (0.1, 0.1, 0.9, 0.15), "Granite Results")
    assert [b[0] for b in blocks].count("list_item") == 2


def test_doctags_cut_by_the_stop_string_still_parse() -> None:
    assert parsed("granite-docling", DOCTAGS)[0] == parsed("granite-docling",
                                                            DOCTAGS + "</doctag>")[0]
    assert parsed("granite-docling", "<doctag></doctag>") == ("", [])


@pytest.mark.parametrize(("reply", "says"), [
    ("<doctag><text><loc_1><loc_2><loc_3><loc_4>cut off", "outside any element"),
    ("<doctag>loose words<text>x</text>", "outside any element"),
])
def test_doctags_malformed(reply: str, says: str) -> None:
    with pytest.raises(ReplyParseError, match=says):
        parse_reply(get_profile("granite-docling"), reply, SIZE)


# --- plain markdown (Qwen3-VL) --------------------------------------------------------


@pytest.mark.parametrize(("reply", "text"), [
    ("# Title\n\nBody", "# Title\n\nBody"),
    ("```markdown\n# Title\n\nBody\n```", "# Title\n\nBody"),
    ("Code:\n\n```\nx = 1\n```\n", "Code:\n\n```\nx = 1\n```"),
    ("", ""),
])
def test_markdown_replies(reply: str, text: str) -> None:
    assert parsed("qwen3-vl", reply) == (text, [])


def test_markdown_with_an_unclosed_fence_is_truncated() -> None:
    with pytest.raises(ReplyParseError, match="not closed"):
        parse_reply(get_profile("qwen3-vl"), "```markdown\n# Title\n\nBody", SIZE)


# --- shared ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["olmocr-2", "chandra-2", "dots-mocr", "deepseek-ocr",
                                  "nanonets-ocr2", "granite-docling", "qwen3-vl"])
def test_a_non_string_reply_is_refused_by_every_parser(name: str) -> None:
    with pytest.raises(ReplyParseError, match="must be a string"):
        parse_reply(get_profile(name), None, SIZE)


def test_the_response_is_parsed_with_the_profiles_parser_and_the_image_size() -> None:
    body = {"choices": [{"finish_reason": "stop", "message": {"content": json.dumps(
        [{"bbox": [0, 0, 504, 700], "category": "Text", "text": "half"}])}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
    reply, usage = parse_chat_response(get_profile("dots-mocr"), body, SIZE)
    assert (reply.text, reply.blocks[0].box) == ("half", (0.0, 0.0, 0.5, 0.5))
    assert usage.total_tokens == 15


@pytest.mark.parametrize(("coords", "box"), [
    ([10, 20, 30, 40], (0.1, 0.2, 0.3, 0.4)),
    ([30, 40, 10, 20], (0.1, 0.2, 0.3, 0.4)),    # inverted corners are sorted
    ([-5, 0, 150, 100], (0.0, 0.0, 1.0, 1.0)),   # clamped to the image
])
def test_box_fractions(coords: list[float], box: tuple[float, ...]) -> None:
    assert box_fractions(coords, 100, 100) == pytest.approx(box)


@pytest.mark.parametrize("coords", [[1, 2, 3, float("nan")], [True, 1, 2, 3], "1,2,3,4", None])
def test_box_fractions_refuse_what_is_not_four_numbers(coords: object) -> None:
    with pytest.raises(ReplyParseError):
        box_fractions(coords, 100, 100)


def test_block_in_points() -> None:
    block = LayoutBlock("Text", (0.1, 0.25, 0.5, 0.5), "x")
    assert block_in_points(block, 612, 792) == {"category": "Text",
                                                "bbox": [61.2, 198.0, 306.0, 396.0], "text": "x"}
