"""What page OCR needs from a renderer.

The production renderer is the render pool (pagegate.pdf.pool.RenderPool: worker
processes, each with its own pdfium); benchmarks plug in a synthetic one. A `PdfSource`
names the document (its key) and carries its bytes or path, so a renderer that keeps
documents open can tell them apart without reading them again.
"""

from __future__ import annotations

from typing import Protocol

from pagegate.pdf.wire import PdfSource, RenderedPage

__all__ = ["PdfSource", "RenderedPage", "Renderer"]


class Renderer(Protocol):
    """Render a page and read its text layer, off the event loop."""

    async def render(self, source: PdfSource, page_index: int, *, rotation: int) -> RenderedPage:
        """Page `page_index` (0-based) as PNG; raises InputError when it cannot be rendered
        (RenderFailedError when the renderer crashed or hung on it)."""
        ...

    async def text(self, source: PdfSource, page_index: int) -> str:
        """The page's text layer ("" for a scan); raises InputError when unreadable."""
        ...
