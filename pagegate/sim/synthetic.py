"""Synthetic pages for the admission benchmark: real page sizes, no PDF work.

The simulator prices a page from its PNG header (prompt tokens from width x height) and
from the sha1 of the PNG bytes (output length, via the server's seed). So a benchmark
page is one solid 996x1288 image (a US-letter page at olmOCR's 1288-px longest side,
about 640 bytes as a 1-bit PNG) plus a `tEXt` chunk that names the page: every page then
has its own digest, hence its own output length, and the same page set with the same
server seed costs the same under every admission strategy.

The renderer builds a page's PNG only when PageOcr asks for it (after admission), the
way the production renderer does.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image

from pagegate.ocr.page import PdfDocument
from pagegate.pdf.reader import RenderedPage
from pagegate.pdf.wire import PdfSource
from pagegate.sim.workload import LETTER_PAGE_PX

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_IHDR_END = 8 + 4 + 4 + 13 + 4  # signature, then IHDR: length, type, 13 data bytes, CRC


def blank_page_png(width: int = LETTER_PAGE_PX[0], height: int = LETTER_PAGE_PX[1]) -> bytes:
    """A solid white page as a 1-bit PNG: tiny to hold and to send, real size in its header."""
    buffer = io.BytesIO()
    Image.new("1", (width, height), 1).save(buffer, "PNG", optimize=True)
    return buffer.getvalue()


def tag_png(png: bytes, text: str) -> bytes:
    """`png` with a tEXt chunk (keyword "Comment") right after IHDR; pixels unchanged."""
    if not png.startswith(_PNG_SIGNATURE) or png[12:16] != b"IHDR":
        raise ValueError("not a PNG with a leading IHDR chunk")
    data = b"Comment\x00" + text.encode("latin-1")
    chunk = struct.pack(">I", len(data)) + b"tEXt" + data
    chunk += struct.pack(">I", zlib.crc32(b"tEXt" + data) & 0xFFFFFFFF)
    return png[:_IHDR_END] + chunk + png[_IHDR_END:]


@dataclass(frozen=True)
class SyntheticGroup:
    """One work group: a single synthetic 'PDF' whose pages are the group's pages."""

    group_id: str
    document: PdfDocument


def synthetic_groups(pages: int, group_pages: int) -> list[SyntheticGroup]:
    """`pages` pages cut into groups of `group_pages` (the last one may be shorter)."""
    if pages < 1 or group_pages < 1:
        raise ValueError("pages and group_pages must be >= 1")
    groups: list[SyntheticGroup] = []
    for number, first in enumerate(range(0, pages, group_pages)):
        group_id = f"group-{number:04d}"
        count = min(group_pages, pages - first)
        uri = f"synthetic://{group_id}.pdf"
        doc = PdfDocument(uri=uri, source=PdfSource(uri, data=group_id.encode()), page_count=count)
        groups.append(SyntheticGroup(group_id, doc))
    return groups


class SyntheticRenderer:
    """A `pagegate.pdf.renderer.Renderer` that returns the tagged blank page, no PDF needed."""

    def __init__(self, base_png: bytes | None = None) -> None:
        self.base_png = base_png if base_png is not None else blank_page_png()
        self.width = int.from_bytes(self.base_png[16:20], "big")
        self.height = int.from_bytes(self.base_png[20:24], "big")
        self.rendered = 0

    def page_png(self, data: bytes, page_index: int) -> bytes:
        """The page's own PNG: its tag is the document's bytes and the page index."""
        return tag_png(self.base_png, f"pagegate-bench {data.decode('latin-1')} p{page_index}")

    async def render(self, source: PdfSource, page_index: int, *, rotation: int) -> RenderedPage:
        self.rendered += 1
        png = self.page_png(source.data or b"", page_index)
        return RenderedPage(png=png, width=self.width, height=self.height)

    async def text(self, source: PdfSource, page_index: int) -> str:
        return ""


def page_count(groups: Sequence[SyntheticGroup]) -> int:
    return sum(g.document.page_count for g in groups)
