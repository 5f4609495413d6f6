"""Log each retry of an S3 request as it starts, through botocore's own event hooks.

botocore retries quietly (up to ten attempts with backoff, more with a dead endpoint's
connect timeouts), so an endpoint that does not answer looked like a hung run.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from pagegate.io.store import S3Client

log = logging.getLogger("pagegate.s3")

_CAUSE = "pagegate_failed_with"  # key in botocore's per-request context: the last attempt's error


def log_retries(client: S3Client) -> None:
    """Log each retry of a request to `client` as it starts: endpoint, attempt, last error.

    botocore retries quietly (up to ten attempts with backoff, more with a dead endpoint's
    connect timeouts), so an endpoint that does not answer looked like a hung run. Two
    hooks on botocore's event system, no patching: `needs-retry` (after every attempt)
    keeps the attempt's error in the request's context; `request-created` (before every
    attempt) logs attempts after the first, with that error.
    """
    client.meta.events.register("needs-retry.s3", _note_failure)
    client.meta.events.register("request-created.s3", _log_retry)


def _note_failure(
    request_dict: dict[str, Any], response: Any = None, caught_exception: Any = None, **_: Any
) -> None:
    cause = attempt_error(response, caught_exception)
    if cause is not None:
        request_dict["context"][_CAUSE] = cause


def _log_retry(request: Any, operation_name: str, **_: Any) -> None:
    retries = request.context.get("retries") or {}
    attempt = int(retries.get("attempt") or 1)
    if attempt > 1:
        log.warning(retry_line(
            operation_name, request.url, attempt, retries.get("max"), request.context.get(_CAUSE)
        ))


def attempt_error(response: Any, caught_exception: Any) -> str | None:
    """What went wrong with one attempt, in a few words; None when it got an answer."""
    if caught_exception is not None:
        return f"{type(caught_exception).__name__}: {caught_exception}"
    if not response:
        return None
    parsed = response[1] if isinstance(response, tuple) and len(response) > 1 else {}
    status = parsed.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if status is None or int(status) < 400:
        return None
    code = parsed.get("Error", {}).get("Code")
    return f"HTTP {status} {code}" if code else f"HTTP {status}"


def retry_line(
    operation: str, url: str, attempt: int, max_attempts: int | None, cause: str | None
) -> str:
    """The log line of one S3 retry: which request, to which endpoint, which attempt, why."""
    parts = urlsplit(url)
    endpoint = f"{parts.scheme}://{parts.netloc}" if parts.netloc else url
    of = f" of {max_attempts}" if max_attempts else ""
    after = f" after {cause}" if cause else ""
    return f"S3 {operation} to {endpoint}: retrying, attempt {attempt}{of}{after}"
