"""The simulator writes each profile's reply format, and pagegate's parser reads it back:
the same text, and boxes on the same places within the grid's rounding."""

from __future__ import annotations

import pytest

from pagegate.errors import ReplyParseError
from pagegate.sim.pages import TextLine
from pagegate.sim.replies import (
    apply_stop,
    cut_reply,
    malformed_reply,
    profile_of,
    write_reply,
)
from pagegate.vlm.formats import parse_reply
from pagegate.vlm.profiles import PROFILES, get_profile

LINES = (
    TextLine("Quarterly results", (0.10, 0.08, 0.45, 0.11)),
    TextLine("Revenue rose by 4 % & costs fell.", (0.10, 0.15, 0.88, 0.17)),
    TextLine("Page 2 of 9", (0.45, 0.95, 0.55, 0.97)),
)
SIZE = (1288, 1667)  # a letter page at olmOCR's 1288 px
LAYOUT = [name for name, p in PROFILES.items() if p.gives_layout]


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_each_format_reads_back_as_the_lines(name: str) -> None:
    profile = get_profile(name)
    reply = parse_reply(profile, write_reply(profile, LINES, SIZE, 2), SIZE)
    for line in LINES:
        assert line.text in reply.text
    assert "page_number" not in reply.text and "<" not in reply.text


@pytest.mark.parametrize("name", LAYOUT)
def test_boxes_come_back_where_the_lines_are(name: str) -> None:
    profile = get_profile(name)
    reply = parse_reply(profile, write_reply(profile, LINES, SIZE), SIZE)
    assert [b.text for b in reply.blocks] == [line.text for line in LINES]
    # one grid step of the coarsest frame (granite-docling's 0..500)
    tolerance = 1 / 500 + 1e-9
    for block, line in zip(reply.blocks, LINES, strict=True):
        assert all(abs(a - b) <= tolerance for a, b in zip(block.box, line.box, strict=True))


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_a_malformed_reply_is_refused_by_its_parser(name: str) -> None:
    profile = get_profile(name)
    with pytest.raises(ReplyParseError):
        parse_reply(profile, malformed_reply(profile, LINES, SIZE), SIZE)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_prompt_tells_which_profile_sent_a_request(name: str) -> None:
    profile = get_profile(name)
    texts = [profile.system_prompt, profile.prompt] if profile.system_prompt else [profile.prompt]
    assert profile_of(texts).name == name


def test_an_unknown_prompt_is_answered_as_olmocr() -> None:
    assert profile_of(["Read this page."]).name == "olmocr-2"
    assert profile_of([]).name == "olmocr-2"


def test_stop_strings_end_the_reply_and_are_left_out() -> None:
    granite = get_profile("granite-docling")
    stop = granite.extra_fields["stop"]
    text = apply_stop(write_reply(granite, LINES, SIZE), stop)
    assert not text.endswith("</doctag>") and text.rstrip().endswith("</text>")
    assert parse_reply(granite, text, SIZE).text.startswith("Quarterly results")
    assert apply_stop("abc", ["x"]) == "abc"


def test_a_cut_reply_is_the_start_of_the_whole() -> None:
    whole = write_reply(get_profile("chandra-2"), LINES, SIZE)
    cut = cut_reply(whole)
    assert whole.startswith(cut) and 0 < len(cut) < len(whole)
