"""Count a PDF's pages by reading a few blocks of it, not the whole object.

The page-estimate sample (pagegate.scale.estimate) must be large enough to cover a
mixed collection (scans and born-digital PDFs differ 10-20x in bytes per page), and a
scan can weigh tens of MB. A PDF's page count sits in its page tree's root (/Count),
which the trailer and the cross-reference data at the end of the file lead to: pypdf
finds it through a file object that fetches 64 KiB blocks on demand (S3 GetObject with
a Range header), so a sampled PDF costs a few blocks whatever its size.

/Count is what the file declares; a damaged file can declare wrong, which is good
enough for an estimate (the shard run counts the real pages). pypdf runs strict here:
its lenient mode checks every object's offset, which reads the whole file; a file that
strict parsing refuses is left out of the sample.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from typing import Any

from pagegate.io.store import S3_SCHEME, split_s3_uri

log = logging.getLogger("pagegate.plan")

BLOCK = 64 * 1024


class RangeFile(io.RawIOBase):
    """A read-only, seekable file over `fetch(start, end)` (end exclusive), block-cached."""

    def __init__(self, fetch: Callable[[int, int], bytes], size: int, block: int = BLOCK) -> None:
        super().__init__()
        self._fetch = fetch
        self._size = size
        self._block = block
        self._blocks: dict[int, bytes] = {}
        self._pos = 0
        self.fetched = 0  # bytes actually fetched

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        end = min(self._size, self._pos + len(view))
        done = 0
        while self._pos < end:
            index, skip = divmod(self._pos, self._block)
            data = self._get(index)[skip : skip + (end - self._pos)]
            if not data:
                break
            view[done : done + len(data)] = data
            done += len(data)
            self._pos += len(data)
        return done

    def _get(self, index: int) -> bytes:
        if index not in self._blocks:
            start = index * self._block
            data = self._fetch(start, min(self._size, start + self._block))
            self.fetched += len(data)
            self._blocks[index] = data
        return self._blocks[index]


def s3_range_fetch(client: Any, uri: str) -> Callable[[int, int], bytes]:
    bucket, key = split_s3_uri(uri)

    def fetch(start: int, end: int) -> bytes:
        body = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}")["Body"]
        try:
            data: bytes = body.read()
        finally:
            body.close()
        return data

    return fetch


def declared_pages(stream: Any) -> int | None:
    """The page count a PDF declares (/Count of its page tree root), or None."""
    try:
        # strict: pypdf's lenient mode checks every object's offset, reading the whole file.
        from pypdf import PdfReader  # imported here: the run's process never needs pypdf

        reader = PdfReader(stream, strict=True)
        count = reader.root_object["/Pages"]["/Count"]  # type: ignore[index]
        return int(count) if int(count) > 0 else None
    except Exception as exc:  # any unreadable file: it is simply left out of the sample
        log.info("page estimate: no page count (%s)", type(exc).__name__)
        return None


def ranged_page_count(uri: str, size: int, *, s3_client: Any) -> tuple[int | None, int]:
    """(declared pages or None, bytes read) for an s3:// URI or a local path."""
    if uri.startswith(S3_SCHEME):
        stream = RangeFile(s3_range_fetch(s3_client, uri), size)
        pages = declared_pages(stream)
        return pages, stream.fetched
    try:
        with open(uri, "rb") as f:  # pypdf reads a file object lazily, a path whole
            pages = declared_pages(f)
            return pages, f.tell()
    except OSError:
        return None, 0
