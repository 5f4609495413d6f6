"""Dolma documents, JSONL lines and markdown paths."""

from __future__ import annotations

import json
import posixpath
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagegate.output.documents import (
    PageResult,
    build_dolma_document,
    document_id,
    dolma_line,
    markdown_relpath,
    markdown_text,
)
from pagegate.vlm.profiles import get_profile
from pagegate.vlm.reply import PageReply

PROFILE = get_profile("olmocr-2")
NOW = datetime(2026, 3, 25, 10, 30, tzinfo=UTC)
URI = "s3://bucket/reports/q1.pdf"


def page(n: int, text: str, *, fallback: bool = False, **reply_fields: Any) -> PageResult:
    if fallback:
        return PageResult(n, text, None, True, 0, 0, 8, error="attempt 7: unparseable")
    fields: dict[str, Any] = {
        "primary_language": "en", "is_rotation_valid": True, "rotation_correction": 0,
        "is_table": False, "is_diagram": False, **reply_fields,
    }
    return PageResult(n, text, PageReply(text=text, **fields), False, 1000 + n, 100 * n, 1)


def build(pages: list[PageResult], **kwargs: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "source_uri": URI, "pages": pages, "model": "olmocr", "profile": PROFILE,
        "now": NOW, "pagegate_version": "0.1.0", **kwargs,
    }
    return build_dolma_document(**args)


def test_document_has_every_dolma_field() -> None:
    pages = [
        page(1, "Title page"),
        page(2, "fallback text", fallback=True),
        page(3, "| a | b |", is_table=True, rotation_correction=90, is_rotation_valid=False),
    ]
    doc = build(pages)
    assert doc == {
        "id": document_id(URI),
        "text": "Title page\nfallback text\n| a | b |",
        "source": "pagegate",
        "added": "2026-03-25",
        "created": "2026-03-25",
        "metadata": {
            "Source-File": URI,
            "pdf-total-pages": 3,
            "total-input-tokens": 1001 + 1003,
            "total-output-tokens": 100 + 300,
            "total-fallback-pages": 1,
            "model": "olmocr",
            "profile": "olmocr-2",
            "prompt-version": "olmocr-no-anchoring-v4-yaml",
            "pagegate-version": "0.1.0",
        },
        "attributes": {
            "pdf_page_numbers": [[0, 10, 1], [11, 24, 2], [25, 34, 3]],
            "primary_language": ["en", None, "en"],
            "is_rotation_valid": [True, True, False],
            "rotation_correction": [0, 0, 90],
            "is_table": [False, False, True],
            "is_diagram": [False, False, False],
            "is_fallback_page": [False, True, False],
        },
    }


def test_id_depends_on_the_source_not_the_text() -> None:
    first = build([page(1, "one reading")])
    second = build([page(1, "another reading")])
    other = build([page(1, "one reading")], source_uri="s3://bucket/other.pdf")
    assert first["id"] == second["id"] != other["id"]


def test_document_id_is_sha1_hex_of_the_uri() -> None:
    # printf '%s' 's3://bucket/reports/q1.pdf' | sha1sum
    assert document_id(URI) == "0094dad8eeecec8095cbed1db4ba9246ef73da3b"
    assert document_id("a") == "86f7e437faa5a7fce15d1ddcb9eaeaea377667b8"
    assert document_id("") == "da39a3ee5e6b4b0d3255bfef95601890afd80709"


@given(st.text())
def test_document_id_is_total_and_hex(uri: str) -> None:
    ident = document_id(uri)
    assert len(ident) == 40 and int(ident, 16) >= 0


def test_pages_are_ordered_by_number() -> None:
    doc = build([page(2, "second"), page(1, "first")])
    assert doc["text"] == "first\nsecond"
    assert doc["attributes"]["pdf_page_numbers"] == [[0, 5, 1], [6, 12, 2]]


def test_empty_pages_keep_their_place() -> None:
    doc = build([page(1, "a"), page(2, ""), page(3, "c")])
    assert doc["text"] == "a\n\nc"
    assert doc["attributes"]["pdf_page_numbers"] == [[0, 1, 1], [2, 2, 2], [3, 4, 3]]


@pytest.mark.parametrize(
    "pages, message",
    [([], "at least one page"), ([page(1, "a"), page(1, "b")], "duplicate page numbers")],
)
def test_bad_page_sets_are_rejected(pages: list[PageResult], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build(pages)


@given(st.lists(st.text(max_size=30), min_size=1, max_size=12), st.randoms())
def test_spans_index_exactly_into_text(texts: list[str], rnd: Any) -> None:
    pages = [page(i + 1, t) for i, t in enumerate(texts)]
    rnd.shuffle(pages)
    doc = build(pages)
    assert doc["text"] == "\n".join(texts)
    spans = doc["attributes"]["pdf_page_numbers"]
    assert [s[2] for s in spans] == list(range(1, len(texts) + 1))
    for (start, end, number), text in zip(spans, texts, strict=True):
        assert doc["text"][start:end] == text
        assert number >= 1
    for key in ("primary_language", "is_rotation_valid", "rotation_correction", "is_table", "is_diagram", "is_fallback_page"):
        assert len(doc["attributes"][key]) == len(texts)


@pytest.mark.parametrize(
    "now, day",
    [
        (datetime(2026, 1, 1, 23, 30, tzinfo=timezone(timedelta(hours=-5))), "2026-01-02"),  # UTC date
        (datetime(2026, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=2))), "2025-12-31"),
        (datetime(2026, 7, 4, 12, 0), "2026-07-04"),  # naive: taken as given
    ],
)
def test_dates_come_from_the_given_now(now: datetime, day: str) -> None:
    doc = build([page(1, "x")], now=now)
    assert doc["added"] == doc["created"] == day


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"page_number": 0}, "1-based"),
        ({"is_fallback": True}, "fallback exactly when"),
        ({"reply": None}, "fallback exactly when"),
        ({"input_tokens": -1}, "negative"),
        ({"attempts": -1}, "negative"),
    ],
)
def test_page_result_rejects_inconsistent_values(kwargs: dict[str, Any], message: str) -> None:
    base = page(1, "x")
    fields = {**base.__dict__, **kwargs}
    with pytest.raises(ValueError, match=message):
        PageResult(**fields)


# --- JSONL ---------------------------------------------------------------------------


def test_dolma_line_is_one_readable_json_line() -> None:
    doc = build([page(1, "Größe: 5 µm\nnext")])
    line = dolma_line(doc)
    assert line.endswith("}\n") and line.count("\n") == 1
    assert "Größe: 5 µm\\nnext" in line  # non-ASCII kept, newline escaped
    assert json.loads(line) == doc


@pytest.mark.parametrize("char, escape", [("\u2028", "\\u2028"), ("\u2029", "\\u2029"), ("\x85", "\\u0085"), ("\ud800", "\\ud800")])
def test_line_breaking_and_unencodable_characters_are_escaped(char: str, escape: str) -> None:
    doc = {"text": f"a{char}b"}
    line = dolma_line(doc)
    assert escape in line and char not in line
    assert len(line.splitlines()) == 1
    line.encode("utf-8")
    assert json.loads(line) == doc


@given(st.text(), st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3))
def test_any_document_gives_one_encodable_line_that_reads_back(text: str, meta: dict[str, str]) -> None:
    doc = {"id": "x", "text": text, "metadata": meta}
    line = dolma_line(doc)
    assert line.endswith("\n") and len(line.splitlines()) == 1
    line.encode("utf-8")
    assert json.loads(line) == doc


# --- markdown ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "uri, expected",
    [
        ("s3://bucket/a/b.pdf", "bucket/a/b.md"),
        ("/abs/dir/x.pdf", "abs/dir/x.md"),
        ("rel/x.PDF", "rel/x.md"),
        ("file:///abs/x.pdf", "abs/x.md"),
        ("s3://bucket//double//slash.pdf", "bucket/double/slash.md"),
        ("/a/../../etc/passwd", "a/etc/passwd.md"),
        ("../../x.pdf", "x.md"),
        ("./a/./b.pdf", "a/b.md"),
        ("C:\\Users\\me\\doc.pdf", "C/Users/me/doc.md"),
        ("c:relative.pdf", "c/relative.md"),
        ("\\\\server\\share\\f.pdf", "server/share/f.md"),
        ("\\dir\\D:evil.pdf", "dir/D_evil.md"),
        ("s3://b/we\x00ird\x1f/na\x7fme.pdf", "b/weird/name.md"),
        ("s3://b/archive.tar.gz", "b/archive.tar.md"),
        ("s3://b/noext", "b/noext.md"),
        ("s3://b/.hidden", "b/.hidden.md"),
        ("s3://b/notes.md", "b/notes.md"),
        ("s3://b/ spaced /x.pdf", "b/spaced/x.md"),
        ("s3://b/ü/日本.pdf", "b/ü/日本.md"),
        ("s3://b/2024-01-01T10:00:00.pdf", "b/2024-01-01T10:00:00.md"),
    ],
)
def test_markdown_paths_mirror_the_source(uri: str, expected: str) -> None:
    assert markdown_relpath(uri) == expected


@pytest.mark.parametrize(
    ("uri", "root", "expected"),
    [
        ("/home/me/pdfs/a.pdf", "/home/me/pdfs/", "a.md"),
        ("/home/me/pdfs/sub/b.pdf", "/home/me/pdfs/", "sub/b.md"),
        ("s3://bucket/pre/fix/c.pdf", "s3://bucket/pre/", "fix/c.md"),
        ("/elsewhere/d.pdf", "/home/me/pdfs/", "elsewhere/d.md"),  # outside: mirrored whole
        ("/home/me/pdfsx/e.pdf", "/home/me/pdfs/", "home/me/pdfsx/e.md"),
        ("/home/me/pdfs/../up.pdf", "/home/me/pdfs/", "up.md"),  # never above markdown/
    ],
)
def test_markdown_paths_are_relative_to_the_source_root(uri: str, root: str, expected: str) -> None:
    assert markdown_relpath(uri, root) == expected


@pytest.mark.parametrize("uri", ["", "/", "..", "s3://", "\\..\\", "\x00"])
def test_sources_without_a_path_get_their_document_id(uri: str) -> None:
    assert markdown_relpath(uri) == f"{document_id(uri)}.md"


def test_over_long_names_are_shortened_with_a_hash() -> None:
    long_a = "s3://b/" + "a" * 300 + ".pdf"
    long_b = "s3://b/" + "a" * 299 + "b.pdf"
    path_a, path_b = markdown_relpath(long_a), markdown_relpath(long_b)
    assert path_a != path_b
    for path in (path_a, path_b):
        name = path.rsplit("/", 1)[1]
        assert len(name.encode()) <= 240 and name.endswith(".md") and "~" in name


pathish = st.lists(
    st.sampled_from(["..", ".", "/", "\\", "C:", "s3://", "file://", "x.pdf", " ", "\x00", "\ud800", "a" * 130])
    | st.text(max_size=4),
    max_size=12,
).map("".join)


@given(st.text() | pathish)
def test_any_source_maps_to_a_safe_relative_markdown_path(uri: str) -> None:
    path = markdown_relpath(uri)
    assert path.endswith(".md")
    assert not path.startswith("/") and "\\" not in path
    assert posixpath.normpath(path) == path
    segments = path.split("/")
    assert all(s not in ("", ".", "..") for s in segments)
    assert all(len(s.encode("utf-8")) <= 240 for s in segments)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in path)
    assert not any(0xD800 <= ord(c) <= 0xDFFF for c in path)
    assert not any(re.match(r"[A-Za-z]:", s) for s in segments)


def test_markdown_text_is_the_document_text() -> None:
    doc = build([page(1, "# Title"), page(2, "body")])
    assert markdown_text(doc) == "# Title\nbody"
    with pytest.raises(ValueError):
        markdown_text({"id": "x"})
