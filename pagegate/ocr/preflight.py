"""The checks a run makes before it sends any page: can it write, read, and be answered.

A wrong input found after the pages were OCR'd throws GPU work away (a workspace that
cannot be written), and one found never gives silent bad output (a misspelt model name:
every page falls back to its text layer). So before anything is planned or sent:

- the workspace is writable: a marker object is written and deleted (a local folder or
  an S3 prefix alike);
- S3 credentials resolve, when any location is on S3;
- every source the run was given names something (a list file exists; a folder, glob or
  prefix matches at least one object). Entries *inside* a list are not checked here: a
  missing one becomes a ledger record and the run goes on;
- every external server answers `/v1/models` and lists the model. A launched server is
  checked by its launcher instead.

Each failure is a PreflightError whose message is the one line a user reads: what is
wrong, where, and what to do. It is blocking I/O; the flow runs it in a thread.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from pagegate.errors import PreflightError, ServerUnreachableError, StorageError
from pagegate.io.s3 import S3Credentials, make_s3_client, s3_code, s3_credentials_found
from pagegate.io.sources import is_list_spec, iter_sources
from pagegate.io.storage import open_store
from pagegate.io.store import S3_SCHEME, S3Client, split_s3_uri
from pagegate.server.launcher import models_listed

log = logging.getLogger("pagegate.preflight")

MARKER_PREFIX = ".pagegate-preflight-"  # the object written and deleted to prove the workspace writable
TIMEOUT_SECONDS = 10.0                  # per request: a check must answer in seconds, not after retries
S3_ATTEMPTS = 2                         # botocore attempts per S3 call in the preflight (runs use 10)
# S3 answers that say "busy", not "no": the run's own ten attempts ride them out, so the
# preflight does not stop a run for them (botocore's standard retry mode retries these).
TRANSIENT_S3_CODES = frozenset({
    "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling",
    "ThrottlingException", "RequestLimitExceeded", "500", "502", "503", "504",
})
ERROR_KEY = "error"                     # a flow's result data when its preflight stopped it
UNREACHABLE_KEY = "server_unreachable"


@dataclass(frozen=True)
class Preflight:
    """What one run is about to use. `servers` empty: a launched server (not checked here)."""

    workspace: str
    sources: Sequence[str] = ()
    servers: Sequence[str] = ()
    model: str = ""
    s3_credentials: S3Credentials | None = None
    s3_retry_mode: str = "standard"
    check_s3: bool = True  # False: S3 credentials come from a block only the flow can load


def run_preflight(check: Preflight, *, timeout: float = TIMEOUT_SECONDS) -> None:
    """Raise PreflightError (ServerUnreachableError for a silent server) on the first problem."""
    client = _s3_client(check, timeout) if check.check_s3 else None
    if client is not None or not check.workspace.startswith(S3_SCHEME):
        check_workspace(check.workspace, s3_client=client)
    sources = [s for s in check.sources if client is not None or not s.startswith(S3_SCHEME)]
    check_sources(sources, s3_client=client)
    if check.servers:
        with httpx.Client(timeout=timeout) as http:
            for url in check.servers:
                check_server(url, check.model, http=http)


def failure_data(exc: PreflightError) -> dict[str, Any]:
    """The result a flow stopped by its preflight returns, for the CLI's line and exit code."""
    return {ERROR_KEY: str(exc), UNREACHABLE_KEY: isinstance(exc, ServerUnreachableError)}


def _s3_client(check: Preflight, timeout: float) -> S3Client | None:
    """A client that gives up quickly, or None when no location is on S3."""
    on_s3 = [u for u in (check.workspace, *check.sources) if u.startswith(S3_SCHEME)]
    if not on_s3:
        return None
    if not s3_credentials_found(check.s3_credentials):
        raise PreflightError(
            f"no S3 credentials for {on_s3[0]}: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), or name a prefect-aws block "
            "with --aws-credentials"
        )
    return make_s3_client(
        retry_mode=check.s3_retry_mode, max_attempts=S3_ATTEMPTS,
        credentials=check.s3_credentials, connect_timeout=timeout,
    )


def check_workspace(uri: str, *, s3_client: S3Client | None) -> None:
    """Write and delete a marker object at the workspace's root."""
    store = open_store(uri, s3_client=s3_client)
    key = f"{MARKER_PREFIX}{secrets.token_hex(6)}"
    try:
        store.write_bytes(key, b"pagegate preflight\n")
        store.delete(key)
    except StorageError as exc:
        if _transient(exc):
            log.warning("preflight: %s is busy (%s); the run will retry", store.uri, _cause(exc))
            return
        raise PreflightError(
            f"workspace {store.uri} is not writable ({_cause(exc)}); "
            "fix its permissions or choose another --workspace"
        ) from exc


def check_sources(specs: Sequence[str], *, s3_client: S3Client | None) -> None:
    """Each spec names something: a list file exists, anything else matches an object."""
    for spec in specs:
        try:
            if is_list_spec(spec):
                _check_list_file(spec, s3_client)
            else:
                next(iter_sources([spec], s3_client=s3_client))
        except StorageError as exc:
            if _transient(exc):
                log.warning("preflight: listing %s is throttled (%s); the run will retry", spec, _cause(exc))
                continue
            raise PreflightError(f"{exc}; check the path, pattern or bucket") from exc


def _check_list_file(spec: str, s3_client: S3Client | None) -> None:
    if spec.startswith(S3_SCHEME):  # a local list file is only taken as one when it exists
        bucket, key = split_s3_uri(spec)
        if not open_store(f"{S3_SCHEME}{bucket}", s3_client=s3_client).exists(key):
            raise StorageError(f"source list {spec!r} does not exist")


def check_server(url: str, model: str, *, http: httpx.Client) -> None:
    """The server at OpenAI base URL `url` answers /models and lists `model`."""
    models_url = f"{url.rstrip('/')}/models"
    try:
        response = http.get(models_url)
    except httpx.HTTPError as exc:
        raise ServerUnreachableError(
            f"server {url} does not answer ({_http_cause(exc)}); start it, or point --server at one"
        ) from exc
    if response.status_code == 404:
        raise PreflightError(
            f"{models_url} answered 404: --server takes the OpenAI base URL, e.g. "
            "http://127.0.0.1:8000/v1"
        )
    if response.status_code != 200:
        raise ServerUnreachableError(
            f"server {url} answered {response.status_code} to GET /models; is it still starting?"
        )
    try:
        served = sorted(models_listed(response.json()))
    except ValueError:
        served = []
    if model not in served:
        hint = f"it serves {', '.join(served)}: pass --model {served[0]}" if served else "it lists no model"
        raise PreflightError(f"model {model!r} is not served by {url}; {hint}")


def _transient(exc: StorageError) -> bool:
    inner = exc.__cause__
    return inner is not None and hasattr(inner, "response") and s3_code(inner) in TRANSIENT_S3_CODES


def _cause(exc: BaseException) -> str:
    """The innermost reason, short: 'Permission denied', 'AccessDenied', ..."""
    inner = exc.__cause__
    if isinstance(inner, OSError) and inner.strerror:
        return inner.strerror
    if inner is not None and hasattr(inner, "response"):  # botocore's ClientError
        return s3_code(inner)
    return str(inner if inner is not None else exc)


def _http_cause(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.ConnectError):
        text = str(exc)
        return "connection refused" if "refused" in text.lower() else text or "cannot connect"
    if isinstance(exc, httpx.TimeoutException):
        return "no answer in time"
    return str(exc) or type(exc).__name__
