"""S3 retries are logged as they happen: endpoint, attempt and the error that caused them.

A real HTTP proxy (tests/fixtures/s3_proxy.py) in front of moto's S3 server answers
503 SlowDown for a while; botocore retries, and pagegate's hooks on its event system
log each retry. Nothing in boto3 is patched.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from pagegate.io.s3 import S3Store, make_s3_client
from pagegate.io.s3_retries import attempt_error, retry_line


def test_each_retry_is_logged_with_its_endpoint_attempt_and_cause(
    s3_proxy: Any, s3_bucket: str, s3_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    s3_client.put_object(Bucket=s3_bucket, Key="in/a.pdf", Body=b"%PDF-1.4 a")
    s3_proxy.plan.unavailable_every(2)  # every second request: 503, then the retry passes
    store = S3Store(s3_bucket, client=make_s3_client())

    with caplog.at_level(logging.WARNING, logger="pagegate.s3"):
        data = [store.read_bytes("in/a.pdf") for _ in range(3)]

    assert data == [b"%PDF-1.4 a"] * 3
    lines = [r.getMessage() for r in caplog.records if r.name == "pagegate.s3"]
    injected = s3_proxy.plan.injected["ServiceUnavailable"]
    assert injected >= 1
    assert len(lines) == injected  # one line per retry, none for a first attempt
    # botocore's retries={"max_attempts": 10} counts retries: 11 attempts in all.
    assert set(lines) == {
        f"S3 GetObject to {s3_proxy.endpoint_url}: retrying, attempt 2 of 11 "
        "after HTTP 503 ServiceUnavailable"
    }


def test_a_connection_error_is_named_in_the_line() -> None:
    class EndpointConnectionError(Exception):
        pass

    cause = attempt_error(None, EndpointConnectionError("Could not connect"))
    assert cause == "EndpointConnectionError: Could not connect"
    assert retry_line("PutObject", "http://10.0.0.1:9000/b/k?x=1", 3, None, cause) == (
        "S3 PutObject to http://10.0.0.1:9000: retrying, attempt 3 "
        "after EndpointConnectionError: Could not connect"
    )
    ok: tuple[Any, dict[str, Any]] = ({}, {"ResponseMetadata": {"HTTPStatusCode": 200}})
    assert attempt_error(ok, None) is None
