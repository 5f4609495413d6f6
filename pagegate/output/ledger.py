"""Failure records: why a source produced no document, in a form a rerun can act on.

olmOCR drops unusable documents with a log line and never retries them (issues #152,
#154). pagegate writes one record per failed source instead, keyed by the same
`document_id` as its output, so "retry the failed ones" is a listing of `ledger/` and a
later success can remove the record. This module only builds, checks and (de)serialises
records; storing them is the I/O layer's job.

`reason` is a short stable class for grouping and retry policy; `detail` is for humans.
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pagegate.errors import DownloadError, InputError, ServerUnavailableError
from pagegate.output.documents import document_id

REASONS: frozenset[str] = frozenset(
    {
        "not_a_pdf",
        "unreadable",
        "encrypted",
        "zero_pages",
        "too_many_pages",
        "render_failed",
        "download_failed",
        "not_found",
        "page_error_rate",
        "server_unavailable",
        "internal_error",
    }
)

_FIELDS = ("source", "reason", "detail", "at", "group_id", "run_id", "extra")


@dataclass(frozen=True)
class FailureRecord:
    """One source that failed, why, and when. `extra` is read-only and JSON-serialisable."""

    source: str
    reason: str
    detail: str
    at: str
    group_id: str | None = None
    run_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"unknown failure reason {self.reason!r}; known: {sorted(REASONS)}")
        _check_utc_timestamp(self.at)
        extra = dict(self.extra)
        json.dumps(extra, allow_nan=False)  # fail at construction, not when writing
        object.__setattr__(self, "extra", types.MappingProxyType(extra))


def _check_utc_timestamp(at: str) -> None:
    try:
        moment = datetime.fromisoformat(at)
    except (TypeError, ValueError):
        raise ValueError(f"'at' must be an ISO-8601 timestamp, got {at!r}") from None
    offset = moment.utcoffset()
    if offset is None or offset.total_seconds() != 0:
        raise ValueError(f"'at' must be in UTC with an explicit offset, got {at!r}")


def utc_timestamp(now: datetime) -> str:
    """`now` as the ledger's ISO-8601 UTC string (e.g. 2026-03-25T10:00:00.000Z)."""
    if now.tzinfo is None:
        raise ValueError("pass an aware datetime; a naive one has no defined UTC time")
    return now.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def record_from_error(
    source: str,
    error: BaseException,
    *,
    at: str,
    group_id: str | None = None,
    run_id: str | None = None,
) -> FailureRecord:
    """Classify an exception that ended a source's processing."""
    extra: dict[str, Any] = {}
    if isinstance(error, InputError):
        reason = error.reason
        detail = str(error) or type(error).__name__
        if isinstance(error, DownloadError) and error.code:
            extra["s3_code"] = error.code
    elif isinstance(error, ServerUnavailableError):
        reason = "server_unavailable"
        detail = str(error) or type(error).__name__
        if error.status is not None:
            extra["status"] = error.status
    else:
        reason = "internal_error"
        message = str(error)
        detail = f"{type(error).__qualname__}: {message}" if message else type(error).__qualname__
    return FailureRecord(
        source=source, reason=reason, detail=detail, at=at,
        group_id=group_id, run_id=run_id, extra=extra,
    )


def record_for_page_error_rate(
    source: str,
    *,
    fallback_pages: int,
    pages: int,
    max_rate: float,
    at: str,
    group_id: str | None = None,
    run_id: str | None = None,
) -> FailureRecord:
    """A document rejected because too many of its pages fell back to the text layer."""
    if pages < 1 or not 0 <= fallback_pages <= pages:
        raise ValueError(f"need 0 <= fallback_pages <= pages and pages >= 1, "
                         f"got {fallback_pages} of {pages}")
    detail = (
        f"{fallback_pages} of {pages} pages fell back to the text layer "
        f"(rate {fallback_pages / pages:.4f} > max {max_rate})"
    )
    return FailureRecord(
        source=source, reason="page_error_rate", detail=detail, at=at,
        group_id=group_id, run_id=run_id,
        extra={"fallback_pages": fallback_pages, "pages": pages, "max_page_error_rate": max_rate},
    )


def record_to_json(rec: FailureRecord) -> str:
    """The record as one JSON object (sorted keys, UTF-8 kept readable)."""
    payload = {name: getattr(rec, name) for name in _FIELDS}
    payload["extra"] = dict(rec.extra)
    return json.dumps(payload, ensure_ascii=False, sort_keys=True, allow_nan=False)


def record_from_json(text: str) -> FailureRecord:
    """Read a record back; unknown keys are ignored so newer writers stay readable."""
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"failure record is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise ValueError("failure record must be a JSON object")
    for name in ("source", "reason", "detail", "at"):
        if not isinstance(payload.get(name), str):
            raise ValueError(f"failure record field {name!r} must be a string")
    for name in ("group_id", "run_id"):
        if not isinstance(payload.get(name), (str, type(None))):
            raise ValueError(f"failure record field {name!r} must be a string or null")
    extra = payload.get("extra", {})
    if not isinstance(extra, dict):
        raise ValueError("failure record field 'extra' must be an object")
    return FailureRecord(
        source=payload["source"], reason=payload["reason"], detail=payload["detail"],
        at=payload["at"], group_id=payload.get("group_id"), run_id=payload.get("run_id"),
        extra=extra,
    )


def ledger_key(source_uri: str) -> str:
    """Workspace-relative key of the source's failure record."""
    return f"ledger/{document_id(source_uri)}.json"


def result_key(source_uri: str) -> str:
    """Workspace-relative key of the source's committed Dolma JSONL."""
    return f"results/{document_id(source_uri)}.jsonl"
