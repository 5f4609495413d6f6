"""Where group tasks persist their results, so a retried flow run finds the finished groups.

A retry (UI "Retry", or any forced AwaitingRetry) may land on another machine, so in
production the results must live in shared storage (Prefect docs, "How to persist and
retrieve workflow results": local results are not visible to a retry that runs elsewhere).
`result_storage` (flow parameter, `--result-storage`) names it:

- empty: Prefect's default: PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK if set, else the local
  folder PREFECT_RESULTS_LOCAL_STORAGE_PATH (~/.prefect/storage), fine on one machine;
- `s3://bucket/prefix`: `S3ResultStorage` below (saved as a block named after the URI),
  boto3 from the standard AWS environment (a run's `aws_credentials` block is for its
  sources and workspace; for results with their own credentials use an `s3-bucket/NAME`
  block, the last form below);
- `/abs/path`, `~/path`, `./path` or `file:///path`: a local folder;
- `block-type/block-name`: a saved storage block, e.g. `s3-bucket/ocr-results` from
  prefect-aws, or a saved `pagegate-s3-result-storage` block.

Register the block with:  prefect block register -m pagegate.tasks.result_storage
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import ClassVar

from prefect.filesystems import WritableFileSystem
from pydantic import Field, PrivateAttr

from pagegate.io.s3 import S3Store, make_s3_client
from pagegate.io.store import S3_SCHEME, split_s3_uri


class S3ResultStorage(WritableFileSystem):
    """Prefect result storage under an S3 prefix, through boto3 and pagegate's S3Store."""

    _block_type_slug: ClassVar[str] = "pagegate-s3-result-storage"
    _block_type_name: ClassVar[str] = "pagegate S3 Result Storage"
    _description: ClassVar[str] = (
        "Persisted Prefect task results under an s3://bucket/prefix, read and written with "
        "boto3 from the worker's AWS environment (AWS_ENDPOINT_URL, AWS_PROFILE, keys)."
    )

    basepath: str = Field(description="s3://bucket/prefix under which results are stored.")
    _s3_store: S3Store | None = PrivateAttr(default=None)

    def _store(self) -> S3Store:
        """Built once per instance: a boto3 client costs ~0.3 s, and is thread-safe once built."""
        if self._s3_store is None:
            bucket, prefix = split_s3_uri(self.basepath)
            self._s3_store = S3Store(bucket, prefix, client=make_s3_client())
        return self._s3_store

    # Prefect calls the a-prefixed methods from async code and the plain ones from sync
    # code (prefect._internal.compatibility.blocks); both are provided.
    def read_path(self, path: str) -> bytes:  # type: ignore[override]
        return self._store().read_bytes(path)

    def write_path(self, path: str, content: bytes) -> str:  # type: ignore[override]
        store = self._store()
        store.write_bytes(path, content)
        return store.uri_for(path)

    async def aread_path(self, path: str) -> bytes:
        return await asyncio.to_thread(self.read_path, path)

    async def awrite_path(self, path: str, content: bytes) -> str:
        return await asyncio.to_thread(self.write_path, path, content)


async def resolve_result_storage(spec: str | None) -> str | Path | None:
    """The `result_storage` task option for the user's string (module doc).

    Prefect accepts a path or a saved block's "type/name" there, never an unsaved block,
    so an s3:// location is saved as an S3ResultStorage block named after its URI
    (idempotent: the same URI always gives the same block).
    """
    if spec is None or not spec.strip():
        return None
    spec = spec.strip()
    if spec.startswith(S3_SCHEME):
        split_s3_uri(spec)  # a malformed URI fails here, at the start of the run
        basepath = spec.rstrip("/")
        name = "s3-" + hashlib.sha1(basepath.encode("utf-8")).hexdigest()[:16]
        await S3ResultStorage(basepath=basepath).asave(name, overwrite=True)
        return f"{S3ResultStorage.get_block_type_slug()}/{name}"
    if spec.startswith("file://"):
        return Path(spec[len("file://"):])
    if spec.startswith(("/", "~", ".")):
        return Path(spec).expanduser().resolve()
    if spec.count("/") == 1 and all(spec.split("/")):
        return spec  # a saved block, "block-type/block-name": Prefect loads it when used
    raise ValueError(
        f"result storage {spec!r}: expected s3://bucket/prefix, an absolute or ./ path, "
        "or a saved block as block-type/block-name"
    )
