"""Open a store, or read one object, by its URI: `s3://...` goes to S3, anything else to disk.

The interface and the guarantees both backends keep are in pagegate.io.store; the
backends are pagegate.io.local and pagegate.io.s3.
"""

from __future__ import annotations

import os
from typing import IO

from pagegate.errors import DownloadError, StorageError
from pagegate.io.local import LocalStore, errno_code
from pagegate.io.s3 import S3Store, get_errors, make_s3_client, s3_get
from pagegate.io.store import S3_SCHEME, S3Client, Store, split_s3_uri


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
        return s3_get(s3_client if s3_client is not None else make_s3_client(), bucket, key)
    path = os.path.abspath(os.path.expanduser(uri))
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise DownloadError(
            f"cannot read {path}: {exc}", source=path, code=errno_code(exc)
        ) from exc


def s3_download(client: S3Client, bucket: str, key: str, file: IO[bytes]) -> None:
    """Stream one object into `file` (never whole in memory); DownloadError as s3_get.

    A plain GetObject read in 1 MiB chunks: boto3's download_fileobj would add a
    HeadObject (whose errors carry no code) and a thread pool for a file this size."""
    uri = f"{S3_SCHEME}{bucket}/{key}"
    if not key or key.endswith("/"):
        raise DownloadError(f"s3 URI names no object: {uri!r}", source=uri)
    with get_errors(uri):
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
        try:
            for chunk in body.iter_chunks(1 << 20):
                file.write(chunk)
        finally:
            body.close()
