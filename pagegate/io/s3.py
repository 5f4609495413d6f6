"""`s3://bucket/prefix` as a `Store` (boto3, botocore's retry modes), and the S3 client
built from the standard AWS environment or from explicit credentials."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pagegate.errors import DownloadError, StorageError, WriteRefusedError
from pagegate.io.s3_retries import log_retries
from pagegate.io.store import S3_SCHEME, ObjectInfo, S3Client, check_key, check_prefix

DEFAULT_PAGE_SIZE = 1000  # S3's own maximum keys per ListObjectsV2 page

# ClientError codes that mean "no such object" (HEAD answers carry no body, only the status).
_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
# A conditional create that found the key taken (or another conditional write of it under way).
_TAKEN_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})
# Write failures that last: what botocore's retries cannot mend (its transient codes,
# SlowDown, 500 and 503 among them, it retries itself). Access is denied or the account
# disabled, the bucket is gone, the keys are unknown or their session has expired.
LASTING_S3_CODES = frozenset({"AccessDenied", "AllAccessDisabled", "AccountProblem",
    "NoSuchBucket", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
    "InvalidToken", "TokenRefreshRequired", "403"})


@contextlib.contextmanager
def write_errors(what: str) -> Iterator[None]:
    """A failed write or delete as StorageError, or WriteRefusedError when it lasts (once
    botocore's retries are spent, so does an endpoint that does not answer)."""
    from botocore import exceptions as boto

    try:
        yield
    except boto.ClientError as exc:
        code = s3_code(exc)
        if code in LASTING_S3_CODES:
            raise WriteRefusedError(f"{what}: {code}", cause=code) from exc
        raise StorageError(f"{what}: {code}") from exc
    except (boto.EndpointConnectionError, boto.NoCredentialsError) as exc:
        raise WriteRefusedError(f"{what}: {exc}", cause=type(exc).__name__) from exc
    except boto.BotoCoreError as exc:
        raise StorageError(f"{what}: {exc}") from exc


def s3_code(exc: Any) -> str:
    """The S3 error code of a botocore ClientError ('NoSuchKey', 'AccessDenied', ...)."""
    return str(exc.response.get("Error", {}).get("Code") or "Unknown")


@dataclass(frozen=True)
class S3Credentials:
    """Explicit S3 credentials and endpoint, in place of the process's AWS environment.

    Plain values, so this layer knows nothing of where they were kept: the Prefect layer
    reads them from a prefect-aws block (tasks/aws_credentials.py). A field left None
    falls back to what botocore finds itself (environment, config files), so a block
    with keys only still honours AWS_ENDPOINT_URL. Secrets stay out of the repr.
    """

    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    region: str | None = None
    endpoint_url: str | None = None
    profile: str | None = None

    def __post_init__(self) -> None:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("S3 credentials need both an access key id and a secret key")


def make_s3_client(
    *,
    retry_mode: str = "standard",
    max_attempts: int = 10,
    max_pool_connections: int = 64,
    credentials: S3Credentials | None = None,
    connect_timeout: float = 60.0,
) -> S3Client:
    """A boto3 S3 client from `credentials`, else the standard AWS environment and config.

    botocore reads AWS_ENDPOINT_URL (and AWS_ENDPOINT_URL_S3), AWS_PROFILE, the key
    variables and the region itself; we only add retries and a region default, since
    a client with no region cannot sign requests. The pool is larger than botocore's
    default of 10 because planning and group tasks fetch many PDFs at once. Explicit
    credentials get the same retries and pool. `connect_timeout` is botocore's own
    default (60 s); the preflight passes a short one so an endpoint that does not
    answer is reported in seconds.
    """
    from botocore.config import Config

    session = _session(credentials)
    client = session.client(
        "s3",
        region_name=session.region_name or "us-east-1",
        endpoint_url=credentials.endpoint_url if credentials else None,
        config=Config(
            retries={"mode": retry_mode, "max_attempts": max_attempts},
            max_pool_connections=max_pool_connections,
            connect_timeout=connect_timeout,
        ),
    )
    log_retries(client)
    return client


class LazyS3Client:
    """A `make_s3_client` client built on first use, for callers that may never need one.

    Building a boto3 client loads botocore's service model, about 15 MB of the process's
    memory per client; a run over local files needs none. Thread-safe; any attribute
    (`get_object`, `meta`, ...) builds the client and comes from it.
    """

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._client: S3Client | None = None
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = make_s3_client(**self._options)
                client = self._client
        return getattr(client, name)


def _session(credentials: S3Credentials | None) -> Any:
    import boto3

    creds = credentials or S3Credentials()
    return boto3.session.Session(
        aws_access_key_id=creds.access_key_id,
        aws_secret_access_key=creds.secret_access_key,
        aws_session_token=creds.session_token,
        region_name=creds.region,
        profile_name=creds.profile,
    )


def s3_credentials_found(credentials: S3Credentials | None = None) -> bool:
    """Whether botocore finds any credentials (explicit ones, else its usual chain).

    Without this, a run with none gets as far as its first request and fails there with
    botocore's NoCredentialsError, deep in a traceback. A profile that does not exist
    counts as none.
    """
    from botocore.exceptions import BotoCoreError

    try:
        return _session(credentials).get_credentials() is not None
    except BotoCoreError:  # ProfileNotFound and the like
        return False


class S3Store:
    """Objects under `s3://bucket/prefix`; keys are relative to the prefix."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: S3Client | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.uri = f"{S3_SCHEME}{bucket}/{self.prefix}" if self.prefix else f"{S3_SCHEME}{bucket}"
        self.page_size = page_size
        self._client = client

    def __repr__(self) -> str:
        return f"S3Store({self.uri!r})"

    @property
    def client(self) -> S3Client:
        """The boto3 client, built on first use (clients are thread-safe once built)."""
        if self._client is None:
            self._client = make_s3_client()
        return self._client

    def _full_key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def uri_for(self, key: str) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self._full_key(key)}"

    def read_bytes(self, key: str) -> bytes:
        return s3_get(self.client, self.bucket, self._full_key(key))

    def write_bytes(self, key: str, data: bytes) -> None:
        """PutObject replaces the whole object at once: S3 never shows a partial upload."""
        full = self._full_key(key)
        with write_errors(f"cannot write s3://{self.bucket}/{full}"):
            self.client.put_object(Bucket=self.bucket, Key=full, Body=data)

    def create(self, key: str, data: bytes) -> bool:
        """PutObject with `If-None-Match: *`: 412 when the key exists, 409 while another
        conditional write of it is under way (that one wins): both mean taken."""
        from botocore.exceptions import ClientError

        full = self._full_key(key)
        try:
            with write_errors(f"cannot write s3://{self.bucket}/{full}"):
                self.client.put_object(Bucket=self.bucket, Key=full, Body=data, IfNoneMatch="*")
        except StorageError as exc:
            cause = exc.__cause__
            if isinstance(cause, ClientError) and s3_code(cause) in _TAKEN_CODES:
                return False
            raise
        return True

    def exists(self, key: str) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full_key(key)
        try:
            self.client.head_object(Bucket=self.bucket, Key=full)
        except ClientError as exc:
            if s3_code(exc) in _MISSING_CODES:
                return False
            raise StorageError(f"cannot stat s3://{self.bucket}/{full}: {s3_code(exc)}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"cannot stat s3://{self.bucket}/{full}: {exc}") from exc
        return True

    def delete(self, key: str) -> None:
        """DeleteObject succeeds for a missing key too, which is what we want."""
        full = self._full_key(key)
        with write_errors(f"cannot delete s3://{self.bucket}/{full}"):
            self.client.delete_object(Bucket=self.bucket, Key=full)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """ListObjectsV2 page by page; keys ending in '/' (console "folders") are skipped."""
        check_prefix(prefix)
        root = f"{self.prefix}/" if self.prefix else ""
        return s3_list(self.client, self.bucket, root, root + prefix, self.page_size)


def s3_list(
    client: S3Client, bucket: str, root: str, prefix: str, page_size: int
) -> Iterator[ObjectInfo]:
    from botocore.exceptions import BotoCoreError, ClientError

    paginator = client.get_paginator("list_objects_v2")
    pages = paginator.paginate(
        Bucket=bucket, Prefix=prefix, PaginationConfig={"PageSize": page_size}
    )
    where = f"s3://{bucket}/{prefix}"
    try:
        for page in pages:
            for obj in page.get("Contents", ()):
                full: str = obj["Key"]
                if full.endswith("/"):
                    continue
                etag = obj.get("ETag")
                yield ObjectInfo(
                    key=full[len(root) :],
                    uri=f"{S3_SCHEME}{bucket}/{full}",
                    size=obj.get("Size"),
                    etag=etag.strip('"') if etag else None,
                    modified=obj["LastModified"].timestamp() if "LastModified" in obj else None,
                )
    except ClientError as exc:
        raise StorageError(f"cannot list {where}: {s3_code(exc)}") from exc
    except BotoCoreError as exc:
        raise StorageError(f"cannot list {where}: {exc}") from exc


@contextlib.contextmanager
def get_errors(uri: str) -> Iterator[None]:
    """A failed GetObject of `uri` as a DownloadError with S3's error code, or the
    transport's exception name when no S3 answer came (refused, timed out after retries)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except ClientError as exc:
        code = s3_code(exc)
        raise DownloadError(f"cannot read {uri}: {code}", source=uri, code=code) from exc
    except BotoCoreError as exc:
        code = type(exc).__name__
        raise DownloadError(f"cannot read {uri}: {exc}", source=uri, code=code) from exc


def s3_get(client: S3Client, bucket: str, key: str) -> bytes:
    with get_errors(f"{S3_SCHEME}{bucket}/{key}"):
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
        try:
            data: bytes = body.read()
        finally:
            body.close()
    return data


# --------------------------------------------------------------------------- entry points

