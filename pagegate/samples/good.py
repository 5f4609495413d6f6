"""Readable sample PDFs made on the fly, for `pagegate demo`, tests and benchmarks.

Every generator is deterministic: the same arguments give the same bytes (reportlab runs in
`invariant` mode, which fixes the creation date and document ID). Drawing uses reportlab;
pypdf sets /Rotate.

`encrypted_pdf` uses reportlab's RC4-128 standard security handler, not pypdf's
`PdfWriter.encrypt`: pypdf draws the file ID (and AES salts and IVs) from `secrets`, so its
output differs on every call. Readers treat both alike (a user password is required); the
PDF tests check an AES-256 file from pypdf as well.
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable

from PIL import Image, ImageDraw, ImageFont
from pypdf import PdfReader, PdfWriter
from reportlab.lib.pagesizes import letter
from reportlab.lib.pdfencrypt import StandardEncryption
from reportlab.lib.units import inch
from reportlab.lib.utils import ImageReader, simpleSplit
from reportlab.pdfgen.canvas import Canvas

_WORDS = (
    "admission", "backlog", "batch", "bucket", "cache", "capacity", "document", "engine",
    "figure", "gate", "gradient", "harbor", "index", "ledger", "margin", "meadow", "model",
    "object", "orchard", "page", "paragraph", "pipeline", "queue", "quiet", "render", "river",
    "sample", "server", "signal", "source", "stone", "table", "text", "token", "vision",
    "window", "winter", "yield", "zenith", "amber", "copper", "lantern", "valley", "ember",
)  # fmt: skip

_MARGIN = 72.0
_BODY_FONT = ("Helvetica", 11.0, 14.0)  # name, size, leading


def sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 14))]
    return " ".join(words).capitalize() + "."


def paragraph(rng: random.Random) -> str:
    return " ".join(sentence(rng) for _ in range(rng.randint(3, 6)))


def _render(
    draw_pages: Callable[[Canvas], None],
    *,
    pagesize: tuple[float, float] = letter,
    encrypt: StandardEncryption | None = None,
) -> bytes:
    out = io.BytesIO()
    canvas = Canvas(out, pagesize=pagesize, invariant=1, encrypt=encrypt)
    draw_pages(canvas)
    canvas.save()
    return out.getvalue()


def _draw_text_page(canvas: Canvas, heading: str, rng: random.Random) -> None:
    """A heading, then paragraphs until the page is about full."""
    width, height = letter
    canvas.setFont("Helvetica-Bold", 16)
    canvas.drawString(_MARGIN, height - _MARGIN, heading)
    name, size, leading = _BODY_FONT
    y = height - _MARGIN - 2 * leading
    for _ in range(rng.randint(2, 5)):
        lines = simpleSplit(paragraph(rng), name, size, width - 2 * _MARGIN)
        if y - leading * len(lines) < _MARGIN:
            break
        text = canvas.beginText(_MARGIN, y)
        text.setFont(name, size, leading)
        for line in lines:
            text.textLine(line)
        canvas.drawText(text)
        y -= leading * (len(lines) + 1)


def _check_pages(pages: int) -> None:
    if pages < 1:
        raise ValueError(f"pages must be >= 1 (zero_page_pdf makes the empty case), got {pages}")


def _text_pages(pages: int, title: str, seed: int) -> Callable[[Canvas], None]:
    _check_pages(pages)

    def draw(canvas: Canvas) -> None:
        rng = random.Random(seed)
        for number in range(1, pages + 1):
            _draw_text_page(canvas, f"{title} page {number}", rng)
            canvas.showPage()

    return draw


def text_pdf(pages: int, *, title: str = "Sample", seed: int = 0) -> bytes:
    """`pages` letter pages of paragraphs; page N starts with the heading "<title> page N"."""
    return _render(_text_pages(pages, title, seed))


def _picture(rng: random.Random, size: tuple[int, int] = (480, 320)) -> Image.Image:
    """A small raster 'figure': a gradient sky with a few coloured shapes."""
    width, height = size
    image = Image.linear_gradient("L").resize(size).convert("RGB")
    draw = ImageDraw.Draw(image)
    for _ in range(6):
        x, y = rng.randrange(width - 60), rng.randrange(height - 60)
        box = (x, y, x + rng.randint(20, 120), y + rng.randint(20, 120))
        colour = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
        if rng.random() < 0.5:
            draw.ellipse(box, fill=colour)
        else:
            draw.rectangle(box, fill=colour)
    return image


def image_pdf(pages: int = 1, *, seed: int = 0) -> bytes:
    """Pages that each hold a drawn raster picture and a caption "Figure N: ..."."""
    _check_pages(pages)

    def draw(canvas: Canvas) -> None:
        rng = random.Random(seed)
        width, height = letter
        for number in range(1, pages + 1):
            picture = _picture(rng)
            box_w, box_h = width - 2 * _MARGIN, (width - 2 * _MARGIN) * 2 / 3
            top = height - _MARGIN - box_h
            canvas.drawImage(ImageReader(picture), _MARGIN, top, box_w, box_h)
            canvas.setFont("Helvetica-Oblique", 11)
            caption = f"Figure {number}: shapes over a gradient, sample {seed}"
            canvas.drawString(_MARGIN, top - 20, caption)
            canvas.showPage()

    return _render(draw)


def _wrap(text: str, font: ImageFont.FreeTypeFont | ImageFont.ImageFont, width: float) -> list[str]:
    """Greedy word wrap measured in the raster font's own pixels."""
    lines: list[str] = []
    for word in text.split():
        if lines and font.getlength(f"{lines[-1]} {word}") <= width:
            lines[-1] = f"{lines[-1]} {word}"
        else:
            lines.append(word)
    return lines


def scanned_pdf(pages: int = 1, *, seed: int = 0) -> bytes:
    """Pages that are only a picture of text (no text layer), like a scanner's output."""
    _check_pages(pages)
    dpi = 100
    size = (int(8.5 * dpi), int(11 * dpi))
    font = ImageFont.load_default(size=20)
    line_height = 28

    def draw(canvas: Canvas) -> None:
        rng = random.Random(seed)
        for number in range(1, pages + 1):
            scan = Image.new("L", size, 255)
            pen = ImageDraw.Draw(scan)
            pen.text((dpi, dpi), f"Scanned page {number}", fill=0, font=font)
            y = dpi + 2 * line_height
            for _ in range(rng.randint(2, 4)):
                for line in _wrap(paragraph(rng), font, size[0] - 2 * dpi):
                    pen.text((dpi, y), line, fill=0, font=font)
                    y += line_height
                y += line_height
            canvas.drawImage(ImageReader(scan), 0, 0, *letter)
            canvas.showPage()

    return _render(draw)


def rotated_pdf(pages: int = 2, *, seed: int = 0) -> bytes:
    """Portrait text pages where every even page carries /Rotate 90 (by default: page 2 of 2).

    A turned page shows landscape with its text running downwards, as a page scanned or
    assembled sideways does. pypdf sets the flag: reportlab's `setPageRotation` also swaps the
    MediaBox, which would display the page upright.
    """
    writer = PdfWriter(
        clone_from=PdfReader(io.BytesIO(text_pdf(pages, title="Rotated", seed=seed)))
    )
    for page in writer.pages[1::2]:
        page.rotate(90)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def encrypted_pdf(password: str = "secret") -> bytes:
    """A text PDF that needs the user password `password` to open (RC4-128, see module doc)."""
    lock = StandardEncryption(password, ownerPassword=f"{password}-owner", strength=128)
    return _render(_text_pages(2, "Encrypted", 0), encrypt=lock)


def owner_locked_pdf(pages: int = 2, *, seed: int = 0) -> bytes:
    """Encrypted with an owner password only ("no printing"): opens with no password."""
    lock = StandardEncryption("", ownerPassword="owner", canPrint=0, canModify=0, strength=128)
    return _render(_text_pages(pages, "Owner locked", seed), encrypt=lock)


def huge_page_pdf() -> bytes:
    """One 200 x 200 inch page (14400 pt, the largest page size Acrobat allows)."""
    side = 200 * inch

    def draw(canvas: Canvas) -> None:
        canvas.setLineWidth(40)
        canvas.rect(inch, inch, side - 2 * inch, side - 2 * inch)
        canvas.line(inch, inch, side - inch, side - inch)
        canvas.setFont("Helvetica-Bold", 600)
        canvas.drawString(10 * inch, side / 2, "Huge page 200 x 200 in")
        canvas.showPage()

    return _render(draw, pagesize=(side, side))
