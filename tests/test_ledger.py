"""Failure records: classification, validation, JSON and keys."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagegate import errors
from pagegate.output.documents import document_id
from pagegate.output.ledger import (
    REASONS,
    FailureRecord,
    ledger_key,
    record_for_page_error_rate,
    record_from_error,
    record_from_json,
    record_to_json,
    result_key,
    utc_timestamp,
)

AT = "2026-03-25T10:00:00.000Z"
SRC = "s3://bucket/a.pdf"


def all_subclasses(cls: type[errors.InputError]) -> set[type[errors.InputError]]:
    found: set[type[errors.InputError]] = {cls}
    for sub in cls.__subclasses__():
        found |= all_subclasses(sub)
    return found


def test_every_input_error_reason_is_a_known_reason() -> None:
    input_errors = all_subclasses(errors.InputError)
    assert len(input_errors) >= 7
    assert {cls.reason for cls in input_errors} <= REASONS
    assert {
        "not_a_pdf", "unreadable", "encrypted", "zero_pages", "too_many_pages",
        "render_failed", "download_failed", "not_found", "page_error_rate", "server_unavailable", "internal_error",
    } == REASONS


@pytest.mark.parametrize(
    "error, reason, detail, extra",
    [
        (errors.NotAPdfError("starts with <html>"), "not_a_pdf", "starts with <html>", {}),
        (errors.CorruptPdfError("xref broken"), "unreadable", "xref broken", {}),
        (errors.EncryptedPdfError("needs a password"), "encrypted", "needs a password", {}),
        (errors.EmptyPdfError("0 pages"), "zero_pages", "0 pages", {}),
        (errors.TooManyPagesError("5000 > 2000"), "too_many_pages", "5000 > 2000", {}),
        (errors.InputError("odd"), "unreadable", "odd", {}),
        (errors.DownloadError("gone", code="NoSuchKey"), "download_failed", "gone", {"s3_code": "NoSuchKey"}),
        (errors.DownloadError("reset"), "download_failed", "reset", {}),
        (errors.ServerUnavailableError("503 for 600 s", status=503), "server_unavailable", "503 for 600 s", {"status": 503}),
        (errors.ServerUnavailableError("refused"), "server_unavailable", "refused", {}),
        (errors.CapacityError("429"), "internal_error", "CapacityError: 429", {}),
        (errors.ReplyParseError("bad"), "internal_error", "ReplyParseError: bad", {}),
        (KeyError("page"), "internal_error", "KeyError: 'page'", {}),
        (RuntimeError(), "internal_error", "RuntimeError", {}),
        (errors.EmptyPdfError(""), "zero_pages", "EmptyPdfError", {}),
    ],
)
def test_errors_are_classified(error: BaseException, reason: str, detail: str, extra: dict[str, Any]) -> None:
    rec = record_from_error(SRC, error, at=AT, group_id="g1", run_id="r1")
    assert rec == FailureRecord(SRC, reason, detail, AT, "g1", "r1", extra)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"reason": "bad_luck"}, "unknown failure reason 'bad_luck'"),
        ({"at": "yesterday"}, "ISO-8601"),
        ({"at": "2026-03-25T10:00:00"}, "UTC"),
        ({"at": "2026-03-25T10:00:00+02:00"}, "UTC"),
        ({"extra": {"when": datetime(2026, 1, 1)}}, "not JSON serializable"),
        ({"extra": {"rate": float("nan")}}, "Out of range float"),
    ],
)
def test_records_are_validated(kwargs: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {"source": SRC, "reason": "unreadable", "detail": "d", "at": AT, **kwargs}
    with pytest.raises((ValueError, TypeError), match=message):
        FailureRecord(**fields)


@pytest.mark.parametrize("at", [AT, "2026-03-25T10:00:00+00:00", "2026-03-25T10:00:00.123456Z"])
def test_utc_timestamps_are_accepted(at: str) -> None:
    assert FailureRecord(SRC, "unreadable", "d", at).at == at


def test_extra_is_a_read_only_copy() -> None:
    extra = {"pages": 3}
    rec = FailureRecord(SRC, "unreadable", "d", AT, extra=extra)
    extra["pages"] = 99
    assert rec.extra == {"pages": 3}
    with pytest.raises(TypeError):
        rec.extra["pages"] = 1  # type: ignore[index]


def test_page_error_rate_record() -> None:
    rec = record_for_page_error_rate(SRC, fallback_pages=3, pages=10, max_rate=0.004, at=AT, run_id="r")
    assert rec.reason == "page_error_rate"
    assert rec.extra == {"fallback_pages": 3, "pages": 10, "max_page_error_rate": 0.004}
    assert rec.detail == "3 of 10 pages fell back to the text layer (rate 0.3000 > max 0.004)"
    assert rec.run_id == "r"
    with pytest.raises(ValueError):
        record_for_page_error_rate(SRC, fallback_pages=1, pages=0, max_rate=0.1, at=AT)
    with pytest.raises(ValueError):
        record_for_page_error_rate(SRC, fallback_pages=11, pages=10, max_rate=0.1, at=AT)


def test_json_form_is_stable() -> None:
    rec = FailureRecord(SRC, "download_failed", "gone", AT, "g", None, {"s3_code": "NoSuchKey"})
    assert json.loads(record_to_json(rec)) == {
        "source": SRC, "reason": "download_failed", "detail": "gone", "at": AT,
        "group_id": "g", "run_id": None, "extra": {"s3_code": "NoSuchKey"},
    }
    assert record_to_json(rec) == record_to_json(record_from_json(record_to_json(rec)))


json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
records = st.builds(
    FailureRecord,
    source=st.text(max_size=30),
    reason=st.sampled_from(sorted(REASONS)),
    detail=st.text(max_size=30),
    at=st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat()),
    group_id=st.none() | st.text(max_size=8),
    run_id=st.none() | st.text(max_size=8),
    extra=st.dictionaries(st.text(max_size=8), json_scalars | st.lists(json_scalars, max_size=3), max_size=4),
)


@given(records)
def test_any_record_round_trips_through_json(rec: FailureRecord) -> None:
    assert record_from_json(record_to_json(rec)) == rec


def test_unknown_keys_are_ignored_for_forward_compatibility() -> None:
    text = json.dumps({"source": SRC, "reason": "encrypted", "detail": "d", "at": AT, "future": 1})
    assert record_from_json(text) == FailureRecord(SRC, "encrypted", "d", AT)


@pytest.mark.parametrize(
    "text, message",
    [
        ("not json", "not JSON"),
        ("[]", "must be a JSON object"),
        (json.dumps({"reason": "encrypted", "detail": "d", "at": AT}), "'source' must be a string"),
        (json.dumps({"source": SRC, "reason": "encrypted", "detail": "d", "at": AT, "run_id": 3}), "'run_id'"),
        (json.dumps({"source": SRC, "reason": "encrypted", "detail": "d", "at": AT, "extra": []}), "'extra'"),
        (json.dumps({"source": SRC, "reason": "nope", "detail": "d", "at": AT}), "unknown failure reason"),
    ],
)
def test_malformed_json_is_rejected(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        record_from_json(text)


def test_keys_hang_off_the_document_id() -> None:
    ident = document_id(SRC)
    assert ledger_key(SRC) == f"ledger/{ident}.json"
    assert result_key(SRC) == f"results/{ident}.jsonl"
    assert ledger_key(SRC) != ledger_key("s3://bucket/b.pdf")


@pytest.mark.parametrize(
    "now, text",
    [
        (datetime(2026, 3, 25, 10, 0, tzinfo=UTC), "2026-03-25T10:00:00.000Z"),
        (datetime(2026, 3, 25, 12, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2))), "2026-03-25T10:00:00.123Z"),
    ],
)
def test_utc_timestamp_formats_aware_datetimes(now: datetime, text: str) -> None:
    assert utc_timestamp(now) == text
    FailureRecord(SRC, "unreadable", "d", text)  # accepted by the record


def test_utc_timestamp_refuses_naive_datetimes() -> None:
    with pytest.raises(ValueError, match="aware"):
        utc_timestamp(datetime(2026, 3, 25, 10, 0))
