"""PDF handling: validate and count pages, render a page to PNG, and pull a page's text layer.

Two libraries, each for what it does best:

* pypdf (pure Python, safe to call from any thread) validates a document and counts its pages
  before any work is scheduled. Every way a source can be unusable ends in one of the
  `pagegate.errors.InputError` classes, so the ledger gets a stable reason.
* pypdfium2 renders pages and extracts fallback text: it is fast and honours each page's
  /Rotate. **pdfium is not thread-safe**: never call `render_page_png` or `extract_page_text`
  from several threads at once. The pipeline runs them in a single-thread executor.

Each render/extract call opens the document from bytes and closes every pdfium object before
returning, so nothing native outlives the call (a per-document cache can come later).

Rotation convention: `render_page_png(..., rotation=r)` turns the rendered page by `r` degrees
**counter-clockwise**, after the page's own /Rotate. That is how olmOCR applies the model's
`rotation_correction` (olmocr/pipeline.py, build_page_query: `Image.transpose(ROTATE_<r>)`, and
PIL's ROTATE_90 turns counter-clockwise), so the model's value is passed through unchanged.
"""

from __future__ import annotations

import io
import logging
import math
from dataclasses import dataclass

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError, WrongPasswordError

from pagegate.errors import (
    CorruptPdfError,
    EmptyPdfError,
    EncryptedPdfError,
    NotAPdfError,
    TooManyPagesError,
)

logger = logging.getLogger(__name__)

# PDF readers accept the header anywhere in the first 1024 bytes (PDF 1.7, Implementation
# note 13 in Annex H; Acrobat and pdfium both tolerate leading junk that far).
_HEADER = b"%PDF-"
_HEADER_WINDOW = 1024

_ROTATIONS = (0, 90, 180, 270)

# PNG is lossless, so the zlib level only trades CPU for bytes. The image goes to a nearby
# vLLM server, while encoding dominates render time (measured on this project's machine, one
# core: 0.85 s of 1.0 s for 20 pages at the default level 6); level 1 is ~1.5x faster
# and, on text pages, no larger.
_PNG_COMPRESS_LEVEL = 1


@dataclass(frozen=True)
class PdfInfo:
    """What the pipeline needs to know about a document before scheduling its pages."""

    page_count: int


@dataclass(frozen=True)
class RenderedPage:
    """A page image ready to send to the model."""

    png: bytes
    width: int
    height: int


@dataclass(frozen=True)
class RenderPlan:
    """The scale to render a page at and the bitmap size that scale produces."""

    scale: float
    width: int
    height: int


def inspect_pdf(
    data: bytes,
    *,
    password: str | None = None,
    max_pages: int | None = None,
    source: str | None = None,
) -> PdfInfo:
    """Validate `data` as a PDF and count its pages with pypdf.

    Raises NotAPdfError, EncryptedPdfError, CorruptPdfError, EmptyPdfError or TooManyPagesError
    (all carrying `source`). An encrypted PDF that opens with the empty user password (only an
    owner password set, as for "no printing" documents) is readable. pypdf's DependencyError
    (a missing crypto package) is a broken installation, not a bad input, and propagates.
    """
    _check_header(data, source)
    try:
        reader = _open_reader(data, password)
        page_count = len(reader.pages)
    except (FileNotDecryptedError, WrongPasswordError) as exc:
        hint = "the password given is wrong" if password else "no password was given"
        raise EncryptedPdfError(f"encrypted PDF, {hint}", source=source) from exc
    except DependencyError:
        raise
    except NotImplementedError as exc:
        # pypdf reads only the Standard security handler; certificate (PubSec) encryption
        # raises NotImplementedError("only Standard PDF encryption handler is available").
        if "encrypt" in str(exc).lower():
            raise EncryptedPdfError(f"unsupported encryption: {exc}", source=source) from exc
        raise CorruptPdfError(f"cannot parse PDF: {exc}", source=source) from exc
    except Exception as exc:
        # On garbage pypdf raises its own errors but also ValueError, KeyError,
        # UnicodeDecodeError, RecursionError...: anything here means "cannot be parsed".
        raise CorruptPdfError(
            f"cannot parse PDF: {type(exc).__name__}: {exc}", source=source
        ) from exc
    if page_count == 0:
        raise EmptyPdfError("PDF has no pages", source=source)
    if max_pages is not None and page_count > max_pages:
        raise TooManyPagesError(
            f"PDF has {page_count} pages, more than the limit of {max_pages}", source=source
        )
    return PdfInfo(page_count=page_count)


def _open_reader(data: bytes, password: str | None) -> PdfReader:
    """A pypdf reader, decrypted with `password` only where the file needs it.

    A run-wide password must not break the other PDFs: pypdf refuses a password for an
    unencrypted file, and an owner-locked file opens with the empty user password that
    pypdf tries by itself. So the password is tried only on an encrypted file, and when it
    does not match, the file is left to pypdf's own empty-password attempt.
    """
    reader = PdfReader(io.BytesIO(data), strict=False)
    if password and reader.is_encrypted:
        if reader.decrypt(password) != PasswordType.NOT_DECRYPTED:
            return reader
        reader = PdfReader(io.BytesIO(data), strict=False)
    return reader


def _check_header(data: bytes, source: str | None) -> None:
    if not data:
        raise NotAPdfError("not a PDF: the file is empty", source=source)
    if _HEADER not in data[:_HEADER_WINDOW]:
        raise NotAPdfError(
            f"not a PDF: no {_HEADER.decode()} header in the first {_HEADER_WINDOW} bytes "
            f"(starts with {data[:40]!r})",
            source=source,
        )


def plan_render(
    width_pt: float, height_pt: float, *, target_longest_dim: int, max_pixels: int
) -> RenderPlan:
    """Choose the render scale for a page of `width_pt` x `height_pt` points.

    The longest side becomes `target_longest_dim` pixels (olmOCR renders at
    `target_longest_image_dim * 72 / longest_side` dpi, i.e. the same scale) unless that would
    exceed `max_pixels`, in which case the page is scaled down to fit. The bitmap size is
    computed as pypdfium2 computes it (`ceil(side * scale)`), so the plan is exact and no page
    shape (a 200-inch square, a 1 x 1000-inch strip) can allocate more than `max_pixels`.
    """
    if not (width_pt > 0 and height_pt > 0 and math.isfinite(width_pt * height_pt)):
        raise ValueError(f"page size must be positive and finite, got {width_pt} x {height_pt}")
    if target_longest_dim < 1 or max_pixels < 1:
        raise ValueError("target_longest_dim and max_pixels must be at least 1")
    longest = max(width_pt, height_pt)
    scale = min(target_longest_dim / longest, math.sqrt(max_pixels / (width_pt * height_pt)))

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


def render_page_png(
    data: bytes,
    page_index: int,
    *,
    target_longest_dim: int = 1288,
    rotation: int = 0,
    password: str | None = None,
    max_pixels: int = 1288 * 1288 * 2,
) -> RenderedPage:
    """Render page `page_index` (0-based) to PNG with pypdfium2; not thread-safe (see module doc).

    The page's own /Rotate is honoured; `rotation` (0/90/180/270) then turns the image that
    many degrees counter-clockwise, olmOCR's convention for the model's rotation_correction.
    The size follows `plan_render`. Raises CorruptPdfError or EncryptedPdfError.
    """
    if rotation not in _ROTATIONS:
        raise ValueError(f"rotation must be one of {_ROTATIONS}, got {rotation!r}")
    if page_index < 0:
        raise ValueError(f"page_index must be >= 0, got {page_index}")
    document = _open_document(data, password)
    try:
        page = _load_page(document, page_index)
        try:
            # get_size() already reflects /Rotate; the pixel plan is symmetric either way.
            width_pt, height_pt = page.get_size()
            try:
                plan = plan_render(
                    width_pt,
                    height_pt,
                    target_longest_dim=target_longest_dim,
                    max_pixels=max_pixels,
                )
            except ValueError as exc:
                raise CorruptPdfError(f"page {page_index} has an unusable size: {exc}") from exc
            # pdfium's extra rotation is clockwise; ours is counter-clockwise.
            bitmap = page.render(scale=plan.scale, rotation=(360 - rotation) % 360)
            try:
                image = bitmap.to_pil()
                out = io.BytesIO()
                image.save(out, format="PNG", compress_level=_PNG_COMPRESS_LEVEL)
                width, height = image.size
            finally:
                bitmap.close()
        finally:
            page.close()
    finally:
        document.close()
    return RenderedPage(png=out.getvalue(), width=width, height=height)


def extract_page_text(data: bytes, page_index: int, *, password: str | None = None) -> str:
    """The text layer of page `page_index`, the fallback when the model cannot read a page.

    olmOCR uses pdftotext here; pdfium's text page is as good for a fallback and needs no
    subprocess. Returns "" for a page without a text layer (a scan). Raises only when the
    document or page cannot be opened at all (CorruptPdfError, EncryptedPdfError). Not
    thread-safe (see module doc).
    """
    if page_index < 0:
        raise ValueError(f"page_index must be >= 0, got {page_index}")
    document = _open_document(data, password)
    try:
        page = _load_page(document, page_index)
        try:
            try:
                text_page = page.get_textpage()
            except pdfium.PdfiumError as exc:
                logger.warning("no text layer readable on page %d: %s", page_index, exc)
                return ""
            try:
                text: str = text_page.get_text_range()
            finally:
                text_page.close()
        finally:
            page.close()
    finally:
        document.close()
    # pdfium ends lines with CRLF.
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()


def _open_document(data: bytes, password: str | None) -> pdfium.PdfDocument:
    try:
        return pdfium.PdfDocument(data, password=password)
    except pdfium.PdfiumError as exc:
        if exc.err_code in (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY):
            raise EncryptedPdfError(f"cannot open encrypted PDF: {exc}") from exc
        raise CorruptPdfError(f"cannot open PDF: {exc}") from exc


def _load_page(document: pdfium.PdfDocument, page_index: int) -> pdfium.PdfPage:
    page_count = len(document)
    if page_index >= page_count:
        # Indices come from inspect_pdf (pypdf); pdfium disagreeing means a damaged file.
        raise CorruptPdfError(f"page {page_index} does not exist: pdfium sees {page_count} pages")
    try:
        return document[page_index]
    except pdfium.PdfiumError as exc:
        raise CorruptPdfError(f"cannot load page {page_index}: {exc}") from exc
