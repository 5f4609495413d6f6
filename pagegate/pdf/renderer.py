"""Run PDF rendering and text extraction off the event loop, one at a time.

pdfium is not thread-safe, so every call goes through one worker thread owned by the
run; the event loop stays free for HTTP while a page renders.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Protocol

from pagegate.pdf.reader import (
    PdfInfo,
    RenderedPage,
    extract_page_text,
    inspect_pdf,
    render_page_png,
)


class Renderer(Protocol):
    """What page OCR needs from a renderer; benchmarks plug in a synthetic one."""

    async def render(
        self, data: bytes, page_index: int, *, rotation: int, password: str | None
    ) -> RenderedPage: ...

    async def text(self, data: bytes, page_index: int, *, password: str | None) -> str: ...


class PageRenderer:
    """Owns the single pdfium thread of a run. Use as a context manager."""

    def __init__(self, *, target_longest_dim: int = 1288) -> None:
        self.target_longest_dim = target_longest_dim
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pagegate-pdfium")

    async def inspect(
        self, data: bytes, *, password: str | None, max_pages: int | None, source: str
    ) -> PdfInfo:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._pool,
            lambda: inspect_pdf(data, password=password, max_pages=max_pages, source=source),
        )

    async def render(
        self, data: bytes, page_index: int, *, rotation: int, password: str | None
    ) -> RenderedPage:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._pool,
            lambda: render_page_png(
                data,
                page_index,
                target_longest_dim=self.target_longest_dim,
                rotation=rotation,
                password=password,
            ),
        )

    async def text(self, data: bytes, page_index: int, *, password: str | None) -> str:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._pool, lambda: extract_page_text(data, page_index, password=password)
        )

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> PageRenderer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
