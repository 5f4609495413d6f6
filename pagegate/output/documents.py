"""Finished pages to output: one Dolma JSONL document per PDF, and its markdown twin.

The Dolma shape follows allenai/olmocr `pipeline.build_dolma_document` (v0.4.27):
`id`, `text`, `source`, `added`, `created`, `metadata` (Source-File, pdf-total-pages,
total-input-tokens, total-output-tokens, total-fallback-pages) and `attributes`
(`pdf_page_numbers` spans plus per-page lists). Differences, on purpose:
- `id` is the sha1 of the *source location*, not of the text. Output keys, the ledger
  and exactly-once commits all hang off it, so a rerun (or a retry after a crash) finds
  the same document whatever the model wrote this time.
- `source` is "pagegate"; metadata also records the model, the prompt version and the
  pagegate version, so every line says how it was made.
- Spans exclude the "\\n" between pages, so `text[start:end]` is exactly the page's
  text (olmOCR folds the separator into the preceding page's span), and every page gets
  a separator, even an empty one, so the page structure survives in `text`.
- `is_fallback_page` is a per-page attribute; a fallback page reports the values
  olmOCR gives its fallback `PageResponse` (language None, rotation valid, 0, no
  table, no diagram).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pagegate.vlm.profiles import ModelProfile
from pagegate.vlm.reply import PageReply

PAGE_SEPARATOR = "\n"
SOURCE_NAME = "pagegate"


@dataclass(frozen=True)
class PageLayout:
    """One page's blocks in PDF points (pagegate.vlm.layout), and the page's size."""

    width_pt: float
    height_pt: float
    blocks: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class PageResult:
    """The final outcome of one page: model text, or the text layer if every attempt failed."""

    page_number: int
    text: str
    reply: PageReply | None
    is_fallback: bool
    input_tokens: int
    output_tokens: int
    attempts: int
    error: str | None = None
    layout: PageLayout | None = None

    def __post_init__(self) -> None:
        if self.page_number < 1:
            raise ValueError(f"page_number is 1-based, got {self.page_number}")
        if self.is_fallback != (self.reply is None):
            raise ValueError("a page is a fallback exactly when it has no model reply")
        if min(self.input_tokens, self.output_tokens, self.attempts) < 0:
            raise ValueError("token and attempt counts cannot be negative")


def document_id(source_uri: str) -> str:
    """Stable id of a source: sha1 hex of its URI (surrogates kept, so it never raises)."""
    return hashlib.sha1(source_uri.encode("utf-8", "surrogatepass")).hexdigest()


def build_dolma_document(
    *,
    source_uri: str,
    pages: Sequence[PageResult],
    model: str,
    profile: ModelProfile,
    now: datetime,
    pagegate_version: str,
) -> dict[str, Any]:
    """One Dolma document for one PDF. Pages may come in any order; numbers must be unique."""
    if not pages:
        raise ValueError("a document needs at least one page")
    ordered = sorted(pages, key=lambda p: p.page_number)
    numbers = [p.page_number for p in ordered]
    if len(set(numbers)) != len(numbers):
        raise ValueError(f"duplicate page numbers in {source_uri!r}")

    spans: list[list[int]] = []
    position = 0
    for index, page in enumerate(ordered):
        if index:
            position += len(PAGE_SEPARATOR)
        spans.append([position, position + len(page.text), page.page_number])
        position += len(page.text)
    text = PAGE_SEPARATOR.join(p.text for p in ordered)

    day = _day(now)
    replies = [_reply_or_fallback(p) for p in ordered]
    return {
        "id": document_id(source_uri),
        "text": text,
        "source": SOURCE_NAME,
        "added": day,
        "created": day,
        "metadata": {
            "Source-File": source_uri,
            "pdf-total-pages": len(ordered),
            "total-input-tokens": sum(p.input_tokens for p in ordered),
            "total-output-tokens": sum(p.output_tokens for p in ordered),
            "total-fallback-pages": sum(p.is_fallback for p in ordered),
            "model": model,
            "profile": profile.name,
            "prompt-version": profile.prompt_version,
            "pagegate-version": pagegate_version,
        },
        "attributes": {
            "pdf_page_numbers": spans,
            "primary_language": [r.primary_language for r in replies],
            "is_rotation_valid": [r.is_rotation_valid for r in replies],
            "rotation_correction": [r.rotation_correction for r in replies],
            "is_table": [r.is_table for r in replies],
            "is_diagram": [r.is_diagram for r in replies],
            "is_fallback_page": [p.is_fallback for p in ordered],
        },
    }


def layout_lines(doc: Mapping[str, Any], pages: Sequence[PageResult]) -> str:
    """The layout sidecar of one document: one JSONL line per page, in page order.

    Each line names the document (`id`, as in its Dolma line) and the page, gives the
    page's size and its blocks (category, bbox [x0, y0, x1, y1] in PDF points from the
    page's top-left corner, text). A page the model gave no layout for (a fallback page,
    a model without boxes) has an empty block list, so the line count is the page count.
    """
    lines = []
    for page in sorted(pages, key=lambda p: p.page_number):
        layout = page.layout
        lines.append(dolma_line({
            "id": doc["id"],
            "page": page.page_number,
            "width_pt": round(layout.width_pt, 2) if layout else None,
            "height_pt": round(layout.height_pt, 2) if layout else None,
            "blocks": list(layout.blocks) if layout else [],
        }))
    return "".join(lines)


def _reply_or_fallback(page: PageResult) -> PageReply:
    if page.reply is not None:
        return page.reply
    return PageReply(None, True, 0, False, False, page.text)


def _day(now: datetime) -> str:
    """`YYYY-MM-DD` (olmOCR's `added`/`created` format), in UTC when `now` is aware."""
    if now.tzinfo is not None:
        now = now.astimezone(UTC)
    return now.date().isoformat()


_UNSAFE_IN_JSONL = re.compile("[\u0085\u2028\u2029\ud800-\udfff]")


def dolma_line(doc: Mapping[str, Any]) -> str:
    """`doc` as one JSONL line: UTF-8 text kept readable, one physical line, always encodable.

    `ensure_ascii=False` leaves NEL, U+2028 and U+2029 raw, and tools that split on
    Unicode line breaks (`str.splitlines`) would cut the record there; a lone surrogate
    (from a bad text layer) would make the line impossible to write as UTF-8. Those are
    written as JSON `\\uXXXX` escapes instead, which read back to the same string.
    """
    encoded = json.dumps(doc, ensure_ascii=False, allow_nan=False)
    return _UNSAFE_IN_JSONL.sub(lambda m: f"\\u{ord(m.group()):04x}", encoded) + "\n"


# --- markdown ------------------------------------------------------------------------

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_DRIVE = re.compile(r"^([A-Za-z]):")
_MAX_SEGMENT_BYTES = 240  # under the 255-byte file-name limit of common filesystems


def markdown_relpath(source_uri: str, root: str | None = None) -> str:
    """The markdown file's path for `source_uri`, relative to the workspace's `markdown/`.

    Under `root` (a folder or prefix ending in '/', the run's source root): the path
    below it, so /home/me/pdfs/sub/a.pdf under /home/me/pdfs/ -> sub/a.md. Elsewhere, or
    with no root, the source is mirrored whole: s3://bucket/a/b.pdf -> bucket/a/b.md (the
    bucket is kept, unlike olmOCR, so two buckets never collide); /abs/dir/x.pdf ->
    abs/dir/x.md (workspaces written before roots existed keep this layout). The caller
    puts it under `markdown/`. The result is always relative, normalised and safe to join under a
    directory: no `..` (olmOCR issue #391), no empty segments, no control characters,
    backslashes are separators, a leading Windows drive `C:` becomes a plain `C` segment
    (a later `x:` prefix becomes `x_`), and over-long names are shortened with a hash.
    A source with no usable path maps to `<document_id>.md`. Sources differing only in
    extension share a path.
    """
    if root and root.endswith("/") and source_uri.startswith(root) and source_uri != root:
        return _relpath(source_uri[len(root):], source_uri)
    return _relpath(_DRIVE.sub(r"\1/", _SCHEME.sub("", source_uri, count=1), count=1), source_uri)


def _relpath(path: str, source_uri: str) -> str:
    segments = [_clean_segment(s) for s in re.split(r"[/\\]", path)]
    segments = [s for s in segments if s not in ("", ".", "..")]
    if not segments:
        return f"{document_id(source_uri)}.md"
    stem, _ext = posixpath.splitext(segments[-1])
    if stem in ("", ".", ".."):
        stem = segments[-1]
    segments[-1] = _shorten(stem, _MAX_SEGMENT_BYTES - len(".md")) + ".md"
    return "/".join(_shorten(s, _MAX_SEGMENT_BYTES) for s in segments)


def _clean_segment(segment: str) -> str:
    """Drop control characters; replace lone surrogates, which no filesystem or S3 takes."""
    out = []
    for ch in segment:
        category = unicodedata.category(ch)
        if category == "Cc":
            continue
        out.append("_" if category == "Cs" else ch)
    # A drive-like prefix in a later segment ("x:y") is an NTFS stream name; keep it inert.
    return _DRIVE.sub(r"\1_", "".join(out).strip(), count=1)


def _shorten(segment: str, limit: int) -> str:
    encoded = segment.encode("utf-8")
    if len(encoded) <= limit:
        return segment
    digest = hashlib.sha1(encoded).hexdigest()[:12]
    head = encoded[: limit - len(digest) - 1].decode("utf-8", "ignore")
    return f"{head}~{digest}"


def markdown_text(doc: Mapping[str, Any]) -> str:
    """The markdown file's content: the document text, with no front matter."""
    text = doc.get("text")
    if not isinstance(text, str):
        raise ValueError("document has no text")
    return text
