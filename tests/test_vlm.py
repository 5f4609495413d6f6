"""Request building and reply parsing for olmOCR-style models."""

from __future__ import annotations

import base64
import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagegate.errors import ReplyParseError
from pagegate.vlm.chat import Usage, build_chat_request, parse_chat_response, usage_of
from pagegate.vlm.profiles import get_profile
from pagegate.vlm.reply import PageReply, format_reply_text, parse_reply_text

PROFILE = get_profile("olmocr-2")
FRONT = (
    "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\n"
    "is_table: False\nis_diagram: False\n---\n"
)


def reply_text(**fields: str) -> str:
    """A reply with the default front matter, fields overridden by raw YAML text."""
    values = {
        "primary_language": "en",
        "is_rotation_valid": "True",
        "rotation_correction": "0",
        "is_table": "False",
        "is_diagram": "False",
    }
    values.update(fields)
    lines = "".join(f"{k}: {v}\n" for k, v in values.items())
    return f"---\n{lines}---\nbody"


# --- request -------------------------------------------------------------------------


def test_request_matches_olmocr_shape_with_text_before_image() -> None:
    png = b"\x89PNG\r\n\x1a\nfake"
    body = build_chat_request(PROFILE, model="olmocr", image_png=png, temperature=0.3)
    assert body == {
        "model": "olmocr",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": PROFILE.prompt},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()},
                    },
                ],
            }
        ],
        "max_tokens": 8000,
        "temperature": 0.3,
    }
    json.dumps(body)  # serialisable as sent


@pytest.mark.parametrize("temperature", [-0.1, float("nan"), float("inf")])
def test_request_rejects_bad_temperature(temperature: float) -> None:
    with pytest.raises(ValueError, match="temperature"):
        build_chat_request(PROFILE, model="m", image_png=b"x", temperature=temperature)


# --- reply text: accepted forms ------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        (FRONT + "Hello world\n", PageReply("en", True, 0, False, False, "Hello world")),
        # empty body, with and without the newline after the closing line
        (FRONT, PageReply("en", True, 0, False, False, "")),
        (FRONT.rstrip("\n"), PageReply("en", True, 0, False, False, "")),
        # CRLF everywhere, and a trailing '\r' on the closing line at the very end
        (FRONT.replace("\n", "\r\n") + "Hi\r\n", PageReply("en", True, 0, False, False, "Hi")),
        (FRONT.replace("\n", "\r\n").rstrip("\n"), PageReply("en", True, 0, False, False, "")),
        # trailing spaces on delimiter lines
        (FRONT.replace("---\n", "---  \n") + "x", PageReply("en", True, 0, False, False, "x")),
        # body whitespace is stripped (olmOCR strips), inner layout kept
        (FRONT + "\n\n  a\n\n b  \n\n", PageReply("en", True, 0, False, False, "a\n\n b")),
        # a later '---' line belongs to the body
        (FRONT + "above\n---\nbelow", PageReply("en", True, 0, False, False, "above\n---\nbelow")),
    ],
)
def test_reply_forms_that_parse(text: str, expected: PageReply) -> None:
    assert parse_reply_text(text) == expected


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("True", True), ("true", True), ("TRUE", True), ("'True'", True), ('"true"', True),
        ("yes", True), ("On", True),
        ("False", False), ("false", False), ("'false'", False), ("no", False), ("off", False),
    ],
)
def test_boolean_coercion(raw: str, expected: bool) -> None:
    assert parse_reply_text(reply_text(is_table=raw)).is_table is expected
    assert parse_reply_text(reply_text(is_rotation_valid=raw)).is_rotation_valid is expected
    assert parse_reply_text(reply_text(is_diagram=raw)).is_diagram is expected


@pytest.mark.parametrize(
    "raw, expected", [("0", 0), ("90", 90), ("'180'", 180), ('"270"', 270), ("+90", 90)]
)
def test_rotation_coercion(raw: str, expected: int) -> None:
    assert parse_reply_text(reply_text(rotation_correction=raw)).rotation_correction == expected


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("en", "en"),
        ("no", "no"),  # Norwegian: safe_load would have made this False
        ("zh-Hant", "zh-Hant"),
        ("null", None), ("~", None), ("", None), ('""', None), ("false", None),
        ("'null'", "null"),  # quoted, so a string, like YAML says
        ('"en"', "en"),
    ],
)
def test_language_values(raw: str, expected: str | None) -> None:
    assert parse_reply_text(reply_text(primary_language=raw)).primary_language == expected


# --- reply text: rejected forms ------------------------------------------------------


@pytest.mark.parametrize(
    "text, message",
    [
        ("Hello, no front matter", "does not open with a '---'"),
        ("", "does not open with a '---'"),
        ("\n" + FRONT, "does not open with a '---'"),
        ("---primary_language: en\n---\n", "does not open with a '---'"),
        ("---\nprimary_language: en\nis_table: False\n", "not closed by a '---' line"),
        (FRONT.replace("\n---\n", "\n---x\n"), "not closed by a '---' line"),
        ("---\n---\ntext", "front matter is empty"),
        ("---\n- a\n- b\n---\n", "must be a mapping"),
        ("---\njust words\n---\n", "must be a mapping"),
        ("---\na: [\n---\n", "not valid YAML: .*line 2"),
        ("---\n\tx: 1\n---\n", "not valid YAML"),
        (reply_text().replace("is_diagram: False\n", ""), "missing field\\(s\\): is_diagram"),
        (
            "---\nprimary_language: en\n---\n",
            "missing field\\(s\\): is_rotation_valid, rotation_correction, is_table, is_diagram",
        ),
        (reply_text().replace("---\nbody", "natural_text: hi\n---\nbody"), "unexpected field\\(s\\): 'natural_text'"),
        (reply_text().replace("is_table: False\n", "is_table: False\nis_table: True\n"), "'is_table' appears twice"),
        (reply_text(is_table="maybe"), "is_table: expected True or False, got 'maybe'"),
        (reply_text(is_rotation_valid="1"), "is_rotation_valid: expected True or False"),
        (reply_text(is_diagram="[True]"), "'is_diagram' must be a single value"),
        (reply_text(rotation_correction="45"), "expected 0, 90, 180 or 270, got 45"),
        (reply_text(rotation_correction="360"), "got 360"),
        (reply_text(rotation_correction="-90"), "expected an integer, got '-90'"),
        (reply_text(rotation_correction="90.0"), "expected an integer"),
        (reply_text(rotation_correction="ninety"), "expected an integer"),
        (reply_text(rotation_correction="\u0669\u0660"), "expected an integer"),  # Arabic-Indic digits
        (reply_text(primary_language="true"), "primary_language: expected a language code or null"),
        (reply_text(primary_language="{a: b}"), "'primary_language' must be a single value"),
        ("---\na: " + "[" * 5000 + "]" * 5000 + "\n---\n", "not valid YAML: maximum recursion"),
    ],
)
def test_reply_forms_that_fail_say_why(text: str, message: str) -> None:
    with pytest.raises(ReplyParseError, match=message):
        parse_reply_text(text)


def test_non_string_content_is_a_parse_error() -> None:
    with pytest.raises(ReplyParseError, match="must be a string"):
        parse_reply_text(None)  # type: ignore[arg-type]


# --- reply text: format and round trips ----------------------------------------------


def test_format_matches_the_guided_decoding_shape() -> None:
    reply = PageReply(None, False, 270, True, False, "")
    assert format_reply_text(reply) == (
        "---\nprimary_language: null\nis_rotation_valid: False\nrotation_correction: 270\n"
        "is_table: True\nis_diagram: False\n---"
    )
    with_body = PageReply("de", True, 0, False, True, "Seite 1")
    assert format_reply_text(with_body).endswith("is_diagram: True\n---\nSeite 1")


@pytest.mark.parametrize("language", ["null", "true", "False", "~", "a: b", " en", "no", "#x", "é"])
def test_awkward_languages_round_trip(language: str) -> None:
    reply = PageReply(language, True, 0, False, False, "t")
    assert parse_reply_text(format_reply_text(reply)) == reply


replies = st.builds(
    PageReply,
    primary_language=st.none() | st.text(min_size=1, max_size=12),
    is_rotation_valid=st.booleans(),
    rotation_correction=st.sampled_from([0, 90, 180, 270]),
    is_table=st.booleans(),
    is_diagram=st.booleans(),
    text=st.text(max_size=200).map(str.strip),
)


@given(replies)
def test_any_reply_round_trips_through_the_format(reply: PageReply) -> None:
    assert parse_reply_text(format_reply_text(reply)) == reply


@given(replies)
def test_round_trip_survives_crlf_line_endings_in_the_front_matter(reply: PageReply) -> None:
    rendered = format_reply_text(reply)
    head, sep, body = rendered.partition("\n---")
    crlf = head.replace("\n", "\r\n") + sep.replace("\n", "\r\n") + body
    assert parse_reply_text(crlf) == reply


yamlish_lines = st.lists(
    st.sampled_from(
        [
            "primary_language: en", "is_rotation_valid: True", "rotation_correction: 90",
            "is_table: False", "is_diagram: no", "---", "- x", "a: [", "? x", "&a b: *a",
            "k: !!python/object:os.system x", "{", "x: |", "  y", "...", "%YAML 1.1", "\t",
        ]
    )
    | st.text(max_size=20),
    max_size=8,
).map("\n".join)


@given(st.text(max_size=300) | st.builds(lambda fm, body: f"---\n{fm}\n---\n{body}", yamlish_lines, st.text(max_size=40)))
def test_junk_never_raises_anything_but_reply_parse_error(text: str) -> None:
    try:
        reply = parse_reply_text(text)
    except ReplyParseError:
        return
    assert isinstance(reply, PageReply)


# --- chat completion response --------------------------------------------------------


def response(content: Any = FRONT + "Hi", finish_reason: Any = "stop", **usage: Any) -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
        "usage": usage or {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500},
    }


def test_good_response_gives_reply_and_usage() -> None:
    reply, usage = parse_chat_response(PROFILE, response())
    assert reply == PageReply("en", True, 0, False, False, "Hi")
    assert usage == Usage(1200, 300)
    assert usage.total_tokens == 1500


def test_length_finish_is_reported_as_truncated() -> None:
    with pytest.raises(ReplyParseError, match=r"truncated.*max_tokens 8000"):
        parse_chat_response(PROFILE, response(finish_reason="length"))


@pytest.mark.parametrize("finish_reason", [None, "abort", "content_filter", 1])
def test_other_finish_reasons_are_rejected(finish_reason: Any) -> None:
    with pytest.raises(ReplyParseError, match="expected 'stop'"):
        parse_chat_response(PROFILE, response(finish_reason=finish_reason))


@pytest.mark.parametrize(
    "usage, ok",
    [
        ({"prompt_tokens": 16000, "completion_tokens": 384, "total_tokens": 16384}, True),
        ({"prompt_tokens": 16000, "completion_tokens": 385, "total_tokens": 16385}, False),
        ({"prompt_tokens": 16000, "completion_tokens": 385}, False),  # total computed
        ({"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20000}, False),  # declared
        ({"prompt_tokens": 16000, "completion_tokens": 999, "total_tokens": 5}, False),  # larger wins
    ],
)
def test_context_overflow_is_rejected_at_the_profile_limit(usage: dict[str, int], ok: bool) -> None:
    body = response(**usage)
    if ok:
        parse_chat_response(PROFILE, body)
    else:
        with pytest.raises(ReplyParseError, match="more than the model's context of 16384"):
            parse_chat_response(PROFILE, body)


@pytest.mark.parametrize(
    "body, message",
    [
        ([], "must be a JSON object"),
        ({}, "no choices"),
        ({"choices": []}, "no choices"),
        ({"choices": "stop"}, "no choices"),
        ({"choices": [None]}, "choices\\[0\\] is not an object"),
        ({"choices": [{"finish_reason": "stop"}]}, "message is not an object"),
        ({"choices": [{"finish_reason": "stop", "message": {"content": None}}]}, "content is not a string"),
        (response(content="no front matter"), "does not open"),
    ],
)
def test_malformed_responses(body: Any, message: str) -> None:
    with pytest.raises(ReplyParseError, match=message):
        parse_chat_response(PROFILE, body)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
response_like = st.fixed_dictionaries(
    {},
    optional={
        "choices": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "finish_reason": st.sampled_from(["stop", "length"]) | json_values,
                    "message": st.fixed_dictionaries({}, optional={"content": st.text(max_size=50) | json_values}) | json_values,
                },
            )
            | json_values,
            max_size=2,
        )
        | json_values,
        "usage": st.fixed_dictionaries(
            {}, optional={"prompt_tokens": json_values, "completion_tokens": json_values, "total_tokens": json_values}
        )
        | json_values,
    },
)


@given(response_like | json_values)
def test_any_json_body_gives_a_reply_or_a_reply_parse_error(body: Any) -> None:
    usage = usage_of(body)
    assert usage.prompt_tokens >= 0 and usage.completion_tokens >= 0
    with contextlib.suppress(ReplyParseError):
        parse_chat_response(PROFILE, body)


@pytest.mark.parametrize(
    "body, expected",
    [
        (response(), Usage(1200, 300)),
        ({"usage": {"prompt_tokens": 7}}, Usage(7, 0)),
        ({"usage": {"prompt_tokens": -1, "completion_tokens": True}}, Usage(0, 0)),
        ({"usage": {"prompt_tokens": "7", "completion_tokens": 2.0}}, Usage(0, 0)),
        ({"usage": None}, Usage(0, 0)),
        ({}, Usage(0, 0)),
        ([], Usage(0, 0)),
        # spent tokens are counted even when the reply itself is unusable
        (response(content="junk", finish_reason="length", prompt_tokens=9, completion_tokens=8000), Usage(9, 8000)),
    ],
)
def test_usage_of_never_raises(body: Any, expected: Usage) -> None:
    assert usage_of(body) == expected


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"primary_language": ""}, ValueError),
        ({"primary_language": 3}, ValueError),
        ({"rotation_correction": 45}, ValueError),
        ({"rotation_correction": True}, ValueError),
        ({"is_table": 1}, TypeError),
        ({"text": None}, TypeError),
    ],
)
def test_page_reply_rejects_impossible_values(kwargs: dict[str, Any], error: type[Exception]) -> None:
    base: dict[str, Any] = {
        "primary_language": "en", "is_rotation_valid": True, "rotation_correction": 0,
        "is_table": False, "is_diagram": False, "text": "",
    }
    with pytest.raises(error):
        PageReply(**{**base, **kwargs})
