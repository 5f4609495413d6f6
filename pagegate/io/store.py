"""The object-store interface, over `s3://bucket/prefix` (boto3) and local directories.

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
- a missing object reads as `DownloadError(code="NoSuchKey")` on both;
- `create` is write-if-absent, atomic: of two creates of one key, exactly one returns
  True (S3: PutObject with `If-None-Match: *`; on disk: a hard link, which fails when the
  name exists). Claims on work are made of it (pagegate.claims).

The boto3 client is built lazily from the standard AWS environment (AWS_ENDPOINT_URL,
AWS_PROFILE, keys, region), so a store costs nothing until it touches the network.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from pagegate.errors import StorageError

S3Client = Any
"""boto3's S3 client; boto3 ships no type hints, so this names the role, not a type."""

S3_SCHEME = "s3://"


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: where it lives and enough metadata to notice it changed."""

    key: str  # path relative to the store root, '/'-separated
    uri: str  # full location: "s3://bucket/prefix/key" or absolute local path
    size: int | None
    etag: str | None  # S3 ETag (quotes stripped); local: f"{mtime_ns:x}-{size:x}"
    modified: float | None = None  # epoch seconds by the store's own clock (S3 LastModified, mtime)


class Store(Protocol):
    """A flat namespace of byte objects under one root."""

    uri: str

    def read_bytes(self, key: str) -> bytes: ...

    def write_bytes(self, key: str, data: bytes) -> None: ...

    def create(self, key: str, data: bytes) -> bool: ...

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None: ...

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]: ...

    def uri_for(self, key: str) -> str: ...


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


def check_prefix(prefix: str) -> str:
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
