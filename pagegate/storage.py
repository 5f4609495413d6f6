"""One small object-store interface over `s3://bucket/prefix` (boto3) and local directories.

Sources are read and outputs are committed through the same `Store` protocol, so
flows never branch on "is this S3 or disk". The two backends agree on the things the
pipeline relies on:

- keys are '/'-separated paths relative to the store root, and a key can never leave
  the root (no '..', no leading '/');
- `write_bytes` is atomic: a reader sees the old object or the new one, never a torn
  one (S3 PutObject is atomic by itself; on disk we write a temp file in the same
  directory and `os.replace` it);
- `list` streams `ObjectInfo` sorted by key (S3's own UTF-8 binary order, which for
  Python strings equals code-point order), one page at a time, so a listing of
  millions of keys never sits in memory;
- a missing object reads as `DownloadError(code="NoSuchKey")` on both.

The boto3 client is built lazily from the standard AWS environment (AWS_ENDPOINT_URL,
AWS_PROFILE, keys, region), so a store costs nothing until it touches the network.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from pagegate.errors import DownloadError, StorageError

S3Client = Any
"""boto3's S3 client; boto3 ships no type hints, so this names the role, not a type."""

S3_SCHEME = "s3://"
DEFAULT_PAGE_SIZE = 1000  # S3's own maximum keys per ListObjectsV2 page
TEMP_PREFIX = ".pagegate-tmp-"  # local temp files; `LocalStore.list` never shows them

# ClientError codes that mean "no such object" (HEAD answers carry no body, only the status).
_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: where it lives and enough metadata to notice it changed."""

    key: str  # path relative to the store root, '/'-separated
    uri: str  # full location: "s3://bucket/prefix/key" or absolute local path
    size: int | None
    etag: str | None  # S3 ETag (quotes stripped); local: f"{mtime_ns:x}-{size:x}"


class Store(Protocol):
    """A flat namespace of byte objects under one root."""

    uri: str

    def read_bytes(self, key: str) -> bytes: ...

    def write_bytes(self, key: str, data: bytes) -> None: ...

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None: ...

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]: ...

    def uri_for(self, key: str) -> str: ...


# --------------------------------------------------------------------------- keys and URIs


def check_key(key: str) -> str:
    """Return `key` if it names one object safely inside a root, else raise StorageError.

    Empty and '.' segments are refused as well as '..': on disk 'a//b' and 'a/./b' are the
    same file, on S3 they are different objects, and the two backends must agree.
    """
    if not key or key.startswith("/") or "\x00" in key:
        raise StorageError(f"invalid object key {key!r}")
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise StorageError(f"invalid object key {key!r}: empty, '.' or '..' segment")
    return key


def _check_prefix(prefix: str) -> str:
    """Validate a listing prefix: like a key, but may be empty and its last segment partial."""
    if not prefix:
        return prefix
    if prefix.startswith("/") or "\x00" in prefix:
        raise StorageError(f"invalid listing prefix {prefix!r}")
    *dirs, last = prefix.split("/")
    if any(part in ("", ".", "..") for part in dirs) or last == "..":
        raise StorageError(f"invalid listing prefix {prefix!r}: empty, '.' or '..' segment")
    return prefix


def split_s3_uri(uri: str) -> tuple[str, str]:
    """Split 's3://bucket/some/key' into ('bucket', 'some/key'); the key part may be ''."""
    if not uri.startswith(S3_SCHEME):
        raise StorageError(f"not an s3:// URI: {uri!r}")
    bucket, _, key = uri[len(S3_SCHEME) :].partition("/")
    if not bucket or any(ch.isspace() for ch in bucket) or "\x00" in uri:
        raise StorageError(f"invalid s3 URI {uri!r}: no usable bucket name")
    return bucket, key


def local_etag(st: os.stat_result) -> str:
    """A cheap change marker for a local file, standing in for S3's ETag."""
    return f"{st.st_mtime_ns:x}-{st.st_size:x}"


def _errno_code(exc: OSError) -> str:
    """'ENOENT'-style name for an OSError, for DownloadError.code."""
    return errno.errorcode.get(exc.errno or 0, "EIO")


def _s3_code(exc: Any) -> str:
    """The S3 error code of a botocore ClientError ('NoSuchKey', 'AccessDenied', ...)."""
    return str(exc.response.get("Error", {}).get("Code") or "Unknown")


# --------------------------------------------------------------------------- S3 client


def make_s3_client(
    *, retry_mode: str = "standard", max_attempts: int = 10, max_pool_connections: int = 64
) -> S3Client:
    """A boto3 S3 client configured from the standard AWS environment and config files.

    botocore reads AWS_ENDPOINT_URL (and AWS_ENDPOINT_URL_S3), AWS_PROFILE, the key
    variables and the region itself; we only add retries and a region default, since
    a client with no region cannot sign requests. The pool is larger than botocore's
    default of 10 because planning and group tasks fetch many PDFs at once.
    """
    import boto3
    from botocore.config import Config

    session = boto3.session.Session()
    return session.client(
        "s3",
        region_name=session.region_name or "us-east-1",
        config=Config(
            retries={"mode": retry_mode, "max_attempts": max_attempts},
            max_pool_connections=max_pool_connections,
        ),
    )


# --------------------------------------------------------------------------- local


class LocalStore:
    """A directory tree as an object store; the directory is created on first write."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.uri = os.path.abspath(os.path.expanduser(os.fspath(root)))

    def __repr__(self) -> str:
        return f"LocalStore({self.uri!r})"

    def uri_for(self, key: str) -> str:
        return os.path.join(self.uri, *check_key(key).split("/"))

    def read_bytes(self, key: str) -> bytes:
        path = self.uri_for(key)
        try:
            with open(path, "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            raise DownloadError(f"no such object: {path}", source=path, code="NoSuchKey") from exc
        except OSError as exc:
            raise DownloadError(
                f"cannot read {path}: {exc}", source=path, code=_errno_code(exc)
            ) from exc

    def write_bytes(self, key: str, data: bytes) -> None:
        """Write to a temp file beside the target, fsync, then rename over it.

        `os.replace` within one directory is atomic on POSIX, so readers see either the
        old file or the complete new one; a crash leaves at most a temp file that `list`
        ignores.
        """
        path = self.uri_for(key)
        directory = os.path.dirname(path)
        # Short and independent of the target's name: a 255-byte file name must still work.
        tmp = os.path.join(directory, f"{TEMP_PREFIX}{secrets.token_hex(8)}")
        try:
            os.makedirs(directory, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}") from exc
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException as exc:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise StorageError(f"cannot write {path}: {exc}") from exc
            raise
        _fsync_dir(directory)

    def exists(self, key: str) -> bool:
        return os.path.isfile(self.uri_for(key))

    def delete(self, key: str) -> None:
        path = self.uri_for(key)
        try:
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError):
            pass
        except OSError as exc:
            raise StorageError(f"cannot delete {path}: {exc}") from exc

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Files under the root whose key starts with `prefix`, in key order, streamed.

        Walks only the deepest directory named by the prefix. Symlinked directories
        are not followed (a link loop would never end); symlinked files are listed.
        """
        _check_prefix(prefix)
        start, _, _ = prefix.rpartition("/")
        start_dir = os.path.join(self.uri, *start.split("/")) if start else self.uri
        return _walk_sorted(start_dir, f"{start}/" if start else "", prefix)


def _walk_sorted(directory: str, key_prefix: str, want: str) -> Iterator[ObjectInfo]:
    """Yield files below `directory` in key order; keys are `key_prefix` + relative path.

    Siblings are sorted by name, with '/' appended to directory names: every key inside a
    directory starts with 'name/', and strings sharing a prefix are contiguous in sorted
    order, so a depth-first walk in that order visits keys in global lexicographic order.
    """
    try:
        with os.scandir(directory) as it:
            entries = [(e.name + "/" if e.is_dir(follow_symlinks=False) else e.name, e) for e in it]
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        raise StorageError(f"cannot list {directory}: {exc}") from exc
    entries.sort(key=lambda pair: pair[0])
    for sort_name, entry in entries:
        key = key_prefix + sort_name
        if sort_name.endswith("/"):
            if key.startswith(want):
                yield from _walk_sorted(entry.path, key, "")
            elif want.startswith(key):
                yield from _walk_sorted(entry.path, key, want)
            continue
        if not key.startswith(want) or entry.name.startswith(TEMP_PREFIX):
            continue
        try:
            st = entry.stat()
        except FileNotFoundError:  # deleted (or a dangling link) since scandir saw it
            continue
        if stat.S_ISREG(st.st_mode):
            yield ObjectInfo(key=key, uri=entry.path, size=st.st_size, etag=local_etag(st))


def _fsync_dir(directory: str) -> None:
    """Make a rename durable; some filesystems cannot open directories, which is fine."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- S3


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
        return _s3_get(self.client, self.bucket, self._full_key(key))

    def write_bytes(self, key: str, data: bytes) -> None:
        """PutObject replaces the whole object at once: S3 never shows a partial upload."""
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full_key(key)
        try:
            self.client.put_object(Bucket=self.bucket, Key=full, Body=data)
        except ClientError as exc:
            raise StorageError(f"cannot write s3://{self.bucket}/{full}: {_s3_code(exc)}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"cannot write s3://{self.bucket}/{full}: {exc}") from exc

    def exists(self, key: str) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full_key(key)
        try:
            self.client.head_object(Bucket=self.bucket, Key=full)
        except ClientError as exc:
            if _s3_code(exc) in _MISSING_CODES:
                return False
            raise StorageError(f"cannot stat s3://{self.bucket}/{full}: {_s3_code(exc)}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"cannot stat s3://{self.bucket}/{full}: {exc}") from exc
        return True

    def delete(self, key: str) -> None:
        """DeleteObject succeeds for a missing key too, which is what we want."""
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full_key(key)
        try:
            self.client.delete_object(Bucket=self.bucket, Key=full)
        except ClientError as exc:
            raise StorageError(f"cannot delete s3://{self.bucket}/{full}: {_s3_code(exc)}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"cannot delete s3://{self.bucket}/{full}: {exc}") from exc

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """ListObjectsV2 page by page; keys ending in '/' (console "folders") are skipped."""
        _check_prefix(prefix)
        root = f"{self.prefix}/" if self.prefix else ""
        return _s3_list(self.client, self.bucket, root, root + prefix, self.page_size)


def _s3_list(
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
                )
    except ClientError as exc:
        raise StorageError(f"cannot list {where}: {_s3_code(exc)}") from exc
    except BotoCoreError as exc:
        raise StorageError(f"cannot list {where}: {exc}") from exc


def _s3_get(client: S3Client, bucket: str, key: str) -> bytes:
    from botocore.exceptions import BotoCoreError, ClientError

    uri = f"{S3_SCHEME}{bucket}/{key}"
    try:
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
        try:
            data: bytes = body.read()
        finally:
            body.close()
    except ClientError as exc:
        code = _s3_code(exc)
        raise DownloadError(f"cannot read {uri}: {code}", source=uri, code=code) from exc
    except BotoCoreError as exc:
        # No S3 answer at all (connection refused, timeout after retries, ...).
        code = type(exc).__name__
        raise DownloadError(f"cannot read {uri}: {exc}", source=uri, code=code) from exc
    return data


# --------------------------------------------------------------------------- entry points


def open_store(uri: str, *, s3_client: S3Client | None = None) -> Store:
    """`s3://bucket/prefix` -> S3Store; anything else is a local directory."""
    if uri.startswith(S3_SCHEME):
        bucket, prefix = split_s3_uri(uri)
        return S3Store(bucket, prefix, client=s3_client)
    return LocalStore(uri)


def read_uri(uri: str, *, s3_client: S3Client | None = None) -> bytes:
    """Read one object by its full location (s3://bucket/key or a local path).

    Pass `s3_client` when reading many objects: building a boto3 client takes ~0.3 s.
    """
    if uri.startswith(S3_SCHEME):
        bucket, key = split_s3_uri(uri)
        if not key or key.endswith("/"):
            raise StorageError(f"s3 URI names no object: {uri!r}")
        return _s3_get(s3_client if s3_client is not None else make_s3_client(), bucket, key)
    path = os.path.abspath(os.path.expanduser(uri))
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise DownloadError(
            f"cannot read {path}: {exc}", source=path, code=_errno_code(exc)
        ) from exc
