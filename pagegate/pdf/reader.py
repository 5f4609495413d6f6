"""Inspect a PDF, render a page to PNG, and pull a page's text layer, in this process.

Opening goes through `pagegate.pdf.document` (pdfium first, pypdf when pdfium cannot).
pypdfium2 renders pages and extracts the fallback text: it is fast and honours each
page's /Rotate. **pdfium is not thread-safe and a hostile file can crash or hang it**, so
the pipeline never calls these functions in its own process: the render pool
(pagegate.pdf.pool) runs them in worker processes (pagegate.pdf.worker), each of which
keeps its documents open (`render_page`, `page_text`) across pages. The one-shot forms
(`inspect_pdf`, `render_page_png`, `extract_page_text`) open and close the document per
call, for tests and tools.

Rotation convention: `rotation=r` turns the rendered page by `r` degrees
**counter-clockwise**, after the page's own /Rotate. That is how olmOCR applies the model's
`rotation_correction` (olmocr/pipeline.py, build_page_query: `Image.transpose(ROTATE_<r>)`, and
PIL's ROTATE_90 turns counter-clockwise), so the model's value is passed through unchanged.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import imagecodecs
import pypdfium2 as pdfium

from pagegate.errors import CorruptPdfError, TooManyPagesError
from pagegate.pdf.document import OpenPdf, PdfInfo, PdfInput, open_pdf
from pagegate.pdf.wire import DEFAULT_MAX_PIXELS, ROTATIONS, RenderedPage

__all__ = [
    "DEFAULT_MAX_PIXELS", "ROTATIONS", "PdfInfo", "RenderPlan", "RenderedPage", "extract_page_text", "inspect_pdf", "page_text",
    "plan_render", "render_page", "render_page_png",
]

logger = logging.getLogger(__name__)


# PNG is lossless, so the encoder's settings only trade CPU for bytes, and encoding is most
# of a page's render time (pdfium rasterises a 1,288 px page in ~4 ms). Pillow picks a PNG
# filter per row by trying each; libpng through imagecodecs with one fixed filter (Up: a
# page is mostly rows like the one above) and zlib level 1 encodes the same pixels about
# twice as fast for ~5 % more bytes (bench/render.py's pages, this project's machine:
# 25 -> 13 ms a page, 251 -> 263 KB). The image goes to a nearby vLLM server.
_PNG_LEVEL = 1
_PNG_FILTER = imagecodecs.PNG.FILTER.UP


@dataclass(frozen=True)
class RenderPlan:
    """The scale to render a page at and the bitmap size that scale produces."""

    scale: float
    width: int
    height: int


def check_page_count(info: PdfInfo, max_pages: int | None, source: str | None) -> PdfInfo:
    if max_pages is not None and info.page_count > max_pages:
        raise TooManyPagesError(
            f"PDF has {info.page_count} pages, more than the limit of {max_pages}", source=source
        )
    return info


def inspect_pdf(
    data: PdfInput,
    *,
    password: str | None = None,
    max_pages: int | None = None,
    source: str | None = None,
) -> PdfInfo:
    """Validate `data` and count its pages (pagegate.pdf.document.open_pdf), then close it.

    Raises NotAPdfError, EncryptedPdfError, CorruptPdfError, EmptyPdfError or
    TooManyPagesError, all carrying `source`. Uses pdfium: not thread-safe.
    """
    with open_pdf(data, password=password, source=source) as pdf:
        return check_page_count(pdf.info, max_pages, source)


def plan_render(
    width_pt: float, height_pt: float, *, target_longest_dim: int, max_pixels: int,
    dpi: float | None = None, target_shortest_dim: int | None = None,
) -> RenderPlan:
    """Choose the render scale for a page of `width_pt` x `height_pt` points.

    The longest side becomes `target_longest_dim` pixels (olmOCR renders at
    `target_longest_image_dim * 72 / longest_side` dpi, i.e. the same scale) unless that would
    exceed `max_pixels`, in which case the page is scaled down to fit. A model profile may
    ask for `dpi` or for `target_shortest_dim` pixels on the shortest side instead; then
    `target_longest_dim` is only a bound on the longest side. The bitmap size is
    computed as pypdfium2 computes it (`ceil(side * scale)`), so the plan is exact and no page
    shape (a 200-inch square, a 1 x 1000-inch strip) can allocate more than `max_pixels`.
    """
    if not (width_pt > 0 and height_pt > 0 and math.isfinite(width_pt * height_pt)):
        raise ValueError(f"page size must be positive and finite, got {width_pt} x {height_pt}")
    if target_longest_dim < 1 or max_pixels < 1:
        raise ValueError("target_longest_dim and max_pixels must be at least 1")
    if (dpi is not None and not dpi > 0) or (target_shortest_dim is not None
                                              and target_shortest_dim < 1):
        raise ValueError("dpi and target_shortest_dim must be positive")
    longest = max(width_pt, height_pt)
    if dpi is not None:
        base = dpi / 72
    elif target_shortest_dim is not None:
        base = target_shortest_dim / min(width_pt, height_pt)
    else:
        base = target_longest_dim / longest
    scale = min(base, target_longest_dim / longest,
                math.sqrt(max_pixels / (width_pt * height_pt)))

    def fits(s: float) -> bool:
        w, h = math.ceil(width_pt * s), math.ceil(height_pt * s)
        return max(w, h) <= target_longest_dim and w * h <= max_pixels

    if not fits(scale):
        # Rounding up to whole pixels overshot. Usually it is float noise (792 * (1288 / 792)
        # can come out a hair above 1288), so first step down a hair.
        nudged = scale * (1 - 1e-9)
        if fits(nudged):
            scale = nudged
        else:
            # A genuine one-pixel overshoot. ceil(x) < x + 1, so any s with
            # (w*s + 1) * (h*s + 1) <= max_pixels and longest*s + 1 <= target fits: take the
            # larger root of the quadratic for the first bound.
            a, b, c = width_pt * height_pt, width_pt + height_pt, 1 - max_pixels
            area_bound = (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
            side_bound = (target_longest_dim - 1) / longest
            scale = min(area_bound, side_bound)
    # Never below one pixel per side: at 0.5 / longest the bitmap is 1 x 1, which every
    # max_pixels >= 1 allows (half a pixel, so float noise cannot round it up to 2).
    scale = max(scale, 0.5 / longest)
    return RenderPlan(scale, math.ceil(width_pt * scale), math.ceil(height_pt * scale))


def render_page(
    pdf: OpenPdf,
    page_index: int,
    *,
    target_longest_dim: int = 1288,
    rotation: int = 0,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    dpi: float | None = None,
    target_shortest_dim: int | None = None,
) -> RenderedPage:
    """Render page `page_index` (0-based) of an open PDF to PNG; not thread-safe.

    The page's own /Rotate is honoured; `rotation` (0/90/180/270) then turns the image that
    many degrees counter-clockwise, olmOCR's convention for the model's rotation_correction.
    The size follows `plan_render`. Raises CorruptPdfError (also when only pypdf could open
    the file: nothing can render it).
    """
    if rotation not in ROTATIONS:
        raise ValueError(f"rotation must be one of {ROTATIONS}, got {rotation!r}")
    page = _load_page(pdf, page_index)
    try:
        # get_size() already reflects /Rotate; the pixel plan is symmetric either way.
        width_pt, height_pt = page.get_size()
        try:
            plan = plan_render(
                width_pt, height_pt, target_longest_dim=target_longest_dim, max_pixels=max_pixels,
                dpi=dpi, target_shortest_dim=target_shortest_dim,
            )
        except ValueError as exc:
            raise CorruptPdfError(f"page {page_index} has an unusable size: {exc}") from exc
        # pdfium's extra rotation is clockwise; ours is counter-clockwise. RGB byte order
        # straight from pdfium: PNG's, so the encoder reads pdfium's buffer as it is.
        bitmap = page.render(scale=plan.scale, rotation=(360 - rotation) % 360,
                             rev_byteorder=True)
        try:
            pixels = bitmap.to_numpy()  # a view of pdfium's buffer: height x width x 3
            png = bytes(imagecodecs.png_encode(pixels, level=_PNG_LEVEL, filter=_PNG_FILTER))
            height, width = pixels.shape[:2]
        finally:
            bitmap.close()
    finally:
        page.close()
    if rotation in (90, 270):
        width_pt, height_pt = height_pt, width_pt
    return RenderedPage(png=png, width=width, height=height, width_pt=width_pt,
                        height_pt=height_pt)


def page_text(pdf: OpenPdf, page_index: int) -> str:
    """The text layer of page `page_index`, the fallback when the model cannot read a page.

    olmOCR uses pdftotext here; pdfium's text page is as good for a fallback and needs no
    subprocess. pypdf reads it when pdfium could not open the file, or cannot load this
    page. Returns "" for a page without a text layer (a scan).
    """
    _check_index(pdf, page_index)
    if pdf.pdfium is not None:
        try:
            page = pdf.pdfium[page_index]
        except pdfium.PdfiumError as exc:
            logger.warning("pdfium cannot load page %d (%s); reading it with pypdf", page_index, exc)
        else:
            try:
                return _pdfium_text(page, page_index)
            finally:
                page.close()
    try:
        text = pdf.pypdf_reader().pages[page_index].extract_text()
    except Exception as exc:  # pypdf raises anything on a damaged page
        logger.warning("no text layer readable on page %d: %s", page_index, exc)
        return ""
    return text.strip()


def _pdfium_text(page: pdfium.PdfPage, page_index: int) -> str:
    try:
        text_page = page.get_textpage()
    except pdfium.PdfiumError as exc:
        logger.warning("no text layer readable on page %d: %s", page_index, exc)
        return ""
    try:
        text: str = text_page.get_text_range()
    finally:
        text_page.close()
    # pdfium ends lines with CRLF.
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()


def _check_index(pdf: OpenPdf, page_index: int) -> None:
    if page_index < 0:
        raise ValueError(f"page_index must be >= 0, got {page_index}")
    if page_index >= pdf.page_count:
        raise CorruptPdfError(f"page {page_index} does not exist: the PDF has "
                              f"{pdf.page_count} pages")


def _load_page(pdf: OpenPdf, page_index: int) -> pdfium.PdfPage:
    _check_index(pdf, page_index)
    if pdf.pdfium is None:
        raise CorruptPdfError(f"pdfium cannot open this PDF ({pdf.pdfium_error}): "
                              "only its text layer can be read")
    try:
        return pdf.pdfium[page_index]
    except pdfium.PdfiumError as exc:
        raise CorruptPdfError(f"cannot load page {page_index}: {exc}") from exc


def render_page_png(
    data: PdfInput,
    page_index: int,
    *,
    target_longest_dim: int = 1288,
    rotation: int = 0,
    password: str | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    dpi: float | None = None,
    target_shortest_dim: int | None = None,
) -> RenderedPage:
    """`render_page` on a PDF opened for this call only. Raises the InputErrors of
    `open_pdf` or CorruptPdfError; not thread-safe."""
    if rotation not in ROTATIONS:
        raise ValueError(f"rotation must be one of {ROTATIONS}, got {rotation!r}")
    if page_index < 0:
        raise ValueError(f"page_index must be >= 0, got {page_index}")
    with open_pdf(data, password=password) as pdf:
        return render_page(pdf, page_index, target_longest_dim=target_longest_dim,
                           rotation=rotation, max_pixels=max_pixels, dpi=dpi,
                           target_shortest_dim=target_shortest_dim)


def extract_page_text(data: PdfInput, page_index: int, *, password: str | None = None) -> str:
    """`page_text` on a PDF opened for this call only; not thread-safe."""
    if page_index < 0:
        raise ValueError(f"page_index must be >= 0, got {page_index}")
    with open_pdf(data, password=password) as pdf:
        return page_text(pdf, page_index)
