"""The pages the simulator can read: each page's text layer, and how to tell which page
an image shows.

A real model reads the page from its image. The simulator cannot, so `pagegate sim
--pdfs DIR` hands it the PDFs a run will send: at start-up it reads each page's text
lines with their boxes (pdfium's text rectangles) and keeps a small grey thumbnail of
the page. A request's image is matched to the page whose thumbnail it is nearest to, and
the reply carries that page's lines, in the requesting model's format
(pagegate.sim.replies). A request that matches no page gets the simulator's usual
stand-in text.

Matching by thumbnail, not by the image's bytes, because every profile renders at its
own size (1288 px, 144 dpi, 192 dpi, a shortest side of 1280 px, and whatever
`--target-longest-image-dim` says): a 48 x 48 box-filtered thumbnail of one page comes
out nearly the same from each size. On the sample corpus (63 pages, four image rules)
the right page was nearest every time, at most half as far as the next one; a match
must keep that margin, so a page that is not in the corpus is not mistaken for one.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pdfium, Pillow and numpy load only in a simulator given --pdfs:
    # `pagegate run` imports this package's command, and keeps PDF libraries out of its
    # process (tests/test_run_memory.py).
    import numpy as np
    import pypdfium2 as pdfium
    from PIL import Image

logger = logging.getLogger(__name__)

THUMB = 48
"""Side of the square grey thumbnail pages are compared by."""
INDEX_LONGEST_SIDE = 256
"""Pixels on the longest side when a corpus page is rendered for its thumbnail."""
ASPECT_TOLERANCE = 0.02
"""A request's image and a page must agree on width / height within this."""
MARGIN = 0.6
"""The nearest page must be at most this share of the distance to the next one."""
LONE_MATCH = 6.0
"""The largest mean grey difference (0-255) accepted when only one page has the shape."""


@dataclass(frozen=True)
class TextLine:
    """One line of a page's text layer and where it sits.

    `box` is (x0, y0, x1, y1) as fractions of the page as displayed (after its /Rotate),
    from the top-left corner, y down: the frame pagegate.vlm.layout's boxes use.
    """

    text: str
    box: tuple[float, float, float, float]


@dataclass(frozen=True)
class CorpusPage:
    """One page the simulator was given: page `index` (0-based) of the PDF at `source`,
    its text lines, its displayed width / height, and its thumbnail."""

    source: str
    index: int
    lines: tuple[TextLine, ...]
    aspect: float
    thumb: np.ndarray  # THUMB x THUMB float32 grey levels

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)


def thumbnail(image: Image.Image) -> np.ndarray:
    """The grey THUMB x THUMB box-filtered thumbnail of an image."""
    import numpy as np
    from PIL import Image

    return np.asarray(image.convert("L").resize((THUMB, THUMB), Image.Resampling.BOX),
                      dtype=np.float32)


def displayed_box(rect: tuple[float, float, float, float], rotation: int,
                  origin: tuple[float, float], size: tuple[float, float],
                  ) -> tuple[float, float, float, float]:
    """A pdfium text rectangle (left, bottom, right, top in the page's own coordinates,
    y up) as fractions of the displayed page, y down.

    `size` is the unrotated page's (width, height), `origin` its crop box's lower-left
    corner; `rotation` is the page's /Rotate, clockwise as the PDF spec defines it.
    """
    left, bottom, right, top = rect
    w, h = size
    x0, x1 = left - origin[0], right - origin[0]
    y0, y1 = bottom - origin[1], top - origin[1]
    if rotation == 90:  # the page turns clockwise: its left edge is now on top
        xs, ys, dw, dh = (y0, y1), (x0, x1), h, w
    elif rotation == 180:
        xs, ys, dw, dh = (w - x1, w - x0), (y0, y1), w, h
    elif rotation == 270:
        xs, ys, dw, dh = (h - y1, h - y0), (w - x1, w - x0), h, w
    else:
        xs, ys, dw, dh = (x0, x1), (h - y1, h - y0), w, h

    def frac(v: float, size: float) -> float:
        return min(1.0, max(0.0, v / size))

    return frac(xs[0], dw), frac(ys[0], dh), frac(xs[1], dw), frac(ys[1], dh)


def _page_lines(page: pdfium.PdfPage) -> tuple[TextLine, ...]:
    rotation = page.get_rotation()
    left, bottom, right, top = page.get_cropbox()
    text_page = page.get_textpage()
    try:
        lines = []
        for i in range(text_page.count_rects()):
            rect = text_page.get_rect(i)
            text = " ".join(text_page.get_text_bounded(*rect).split())
            if text:
                box = displayed_box(rect, rotation, (left, bottom), (right - left, top - bottom))
                lines.append(TextLine(text, box))
    finally:
        text_page.close()
    return tuple(sorted(lines, key=lambda line: (round(line.box[1], 3), line.box[0])))


def read_pages(path: Path) -> list[CorpusPage]:
    """Every page of one PDF; a file pdfium cannot open gives none (it would fail a run
    before any request, so the simulator never has to answer for it)."""
    import pypdfium2 as pdfium

    try:
        doc = pdfium.PdfDocument(path.read_bytes())
    except (pdfium.PdfiumError, OSError) as exc:
        logger.info("pagegate sim: not reading %s (%s)", path, exc)
        return []
    pages = []
    try:
        for index in range(len(doc)):
            page = doc[index]
            try:
                width, height = page.get_size()
                scale = INDEX_LONGEST_SIDE / max(width, height)
                image = page.render(scale=scale).to_pil()
                pages.append(CorpusPage(str(path), index, _page_lines(page), width / height,
                                        thumbnail(image)))
            except pdfium.PdfiumError as exc:
                logger.info("pagegate sim: skipping page %d of %s (%s)", index, path, exc)
            finally:
                page.close()
    finally:
        doc.close()
    return pages


def pdf_paths(paths: Iterable[str]) -> list[Path]:
    """The PDFs named, or found under the folders named (recursively), in sorted order."""
    found: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.suffix.lower() == ".pdf" and p.is_file())
        elif path.is_file():
            found.append(path)
        else:
            raise ValueError(f"--pdfs {name}: no such file or folder")
    return found


class PageIndex:
    """The corpus' pages, found again from a request's image (`find`)."""

    def __init__(self, pages: Sequence[CorpusPage]) -> None:
        self.pages = tuple(pages)

    @classmethod
    def from_paths(cls, paths: Iterable[str]) -> PageIndex:
        return cls([page for path in pdf_paths(paths) for page in read_pages(path)])

    def find(self, png: bytes) -> CorpusPage | None:
        """The page this image shows, or None when no page matches with margin."""
        import numpy as np
        from PIL import Image

        if not self.pages:
            return None
        try:
            image = Image.open(io.BytesIO(png))
            aspect = image.width / image.height
            query = thumbnail(image)
        except (OSError, ValueError, ZeroDivisionError):
            return None
        ranked = sorted(
            (float(np.abs(query - page.thumb).mean()), n)
            for n, page in enumerate(self.pages)
            if abs(page.aspect - aspect) <= ASPECT_TOLERANCE * aspect
        )
        if not ranked:
            return None
        best, n = ranked[0]
        # Pages with the same lines (a PDF given twice, blank pages) get the same reply.
        others = [d for d, m in ranked[1:] if self.pages[m].lines != self.pages[n].lines]
        if not others:
            return self.pages[n] if best <= LONE_MATCH else None
        return self.pages[n] if best <= MARGIN * others[0] else None
