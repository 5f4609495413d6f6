"""Sample PDFs made on the fly, good and bad, for `pagegate demo` and for tests.

Every generator is deterministic: the same arguments give the same bytes (reportlab runs in
`invariant` mode, which fixes the creation date and document ID). Drawing uses reportlab;
pypdf sets /Rotate and writes the zero-page file. `BAD_SAMPLES` pairs each bad kind with the
ledger reason `pagegate.pdf.reader.inspect_pdf` gives it, and the tests hold the two to that.

Two choices worth knowing:

* `encrypted_pdf` uses reportlab's RC4-128 standard security handler, not pypdf's
  `PdfWriter.encrypt`: pypdf draws the file ID (and AES salts and IVs) from `secrets`, so its
  output differs on every call. Readers treat both alike (a user password is required);
  the PDF tests check an AES-256 file from pypdf as well.
* `broken_xref_pdf` is a PDF 1.5 file whose objects live in a compressed object stream and
  whose cross-reference stream is garbage. Damaging a classic `xref` table is not enough:
  pypdf and pdfium both rebuild it by scanning for `N 0 obj`. Objects inside an object stream
  cannot be found by scanning, so neither library can recover the catalog.
"""

from __future__ import annotations

import io
import random
import zlib
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from types import MappingProxyType

from PIL import Image, ImageDraw, ImageFont
from pypdf import PdfReader, PdfWriter
from reportlab.lib.pagesizes import letter
from reportlab.lib.pdfencrypt import StandardEncryption
from reportlab.lib.units import inch
from reportlab.lib.utils import ImageReader, simpleSplit
from reportlab.pdfgen.canvas import Canvas

from pagegate.errors import CorruptPdfError, EmptyPdfError, EncryptedPdfError, NotAPdfError

_WORDS = (
    "admission", "backlog", "batch", "bucket", "cache", "capacity", "document", "engine",
    "figure", "gate", "gradient", "harbor", "index", "ledger", "margin", "meadow", "model",
    "object", "orchard", "page", "paragraph", "pipeline", "queue", "quiet", "render", "river",
    "sample", "server", "signal", "source", "stone", "table", "text", "token", "vision",
    "window", "winter", "yield", "zenith", "amber", "copper", "lantern", "valley", "ember",
)  # fmt: skip

_MARGIN = 72.0
_BODY_FONT = ("Helvetica", 11.0, 14.0)  # name, size, leading


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 14))]
    return " ".join(words).capitalize() + "."


def _paragraph(rng: random.Random) -> str:
    return " ".join(_sentence(rng) for _ in range(rng.randint(3, 6)))


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
        lines = simpleSplit(_paragraph(rng), name, size, width - 2 * _MARGIN)
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
                for line in _wrap(_paragraph(rng), font, size[0] - 2 * dpi):
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


def zero_page_pdf() -> bytes:
    """A structurally valid PDF whose page tree is empty (/Count 0)."""
    out = io.BytesIO()
    PdfWriter().write(out)
    return out.getvalue()


def truncated_pdf() -> bytes:
    """A four-page text PDF cut in half, like an interrupted download."""
    whole = text_pdf(4, title="Truncated")
    return whole[: len(whole) // 2]


def html_as_pdf() -> bytes:
    """What a web server's error page looks like once saved under a .pdf name."""
    return (
        b'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        b"<title>403 Forbidden</title>\n</head>\n<body>\n<h1>Forbidden</h1>\n"
        b"<p>You don't have permission to access report-2024.pdf on this server.</p>\n"
        b"<hr>\n<address>Web server at files.example.org Port 443</address>\n"
        b"</body>\n</html>\n"
    )


def random_bytes(n: int = 4096, seed: int = 0) -> bytes:
    """`n` bytes of seeded noise."""
    return random.Random(seed).randbytes(n)


def empty_file() -> bytes:
    """A zero-byte file."""
    return b""


def broken_xref_pdf() -> bytes:
    """Valid header and objects, garbage cross-reference stream: unrecoverable (module doc)."""
    objects = {
        2: b"<< /Type /Catalog /Pages 3 0 R >>",
        3: b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        4: b"<< /Type /Page /Parent 3 0 R /MediaBox [0 0 612 792] /Contents 5 0 R "
        b"/Resources << /Font << /F1 6 0 R >> >> >>",
        6: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    # Object stream (PDF 1.7 section 7.5.7): "num offset" pairs, then the objects.
    pairs, body = [], b""
    for number, obj in objects.items():
        pairs.append(b"%d %d" % (number, len(body)))
        body += obj + b"\n"
    index = b" ".join(pairs) + b"\n"
    packed = zlib.compress(index + body)
    content = b"BT /F1 24 Tf 72 700 Td (Broken cross-reference) Tj ET"
    out = bytearray(b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n")
    offsets = {1: len(out)}
    out += b"1 0 obj\n<< /Type /ObjStm /N %d /First %d /Filter /FlateDecode /Length %d >>\n" % (
        len(objects),
        len(index),
        len(packed),
    )
    out += b"stream\n" + packed + b"\nendstream\nendobj\n"
    offsets[5] = len(out)
    out += b"5 0 obj\n<< /Length %d >>\nstream\n" % len(content) + content
    out += b"\nendstream\nendobj\n"
    xref_at = len(out)
    # Where the cross-reference stream (7.5.8) that maps objects 2-4 and 6 into object 1 stood,
    # there is only noise, as after a bad copy.
    out += random.Random(7).randbytes(160)
    out += b"\nstartxref\n%d\n%%%%EOF\n" % xref_at
    return bytes(out)


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


GOOD_SAMPLES: Mapping[str, Callable[[], bytes]] = MappingProxyType(
    {
        "text": partial(text_pdf, 3),
        "image": image_pdf,
        "scanned": scanned_pdf,
        "rotated": rotated_pdf,
        "owner-locked": owner_locked_pdf,
        "huge-page": huge_page_pdf,
    }
)
"""Readable samples by name."""

BAD_SAMPLES: Mapping[str, tuple[Callable[[], bytes], str]] = MappingProxyType(
    {
        "encrypted": (encrypted_pdf, EncryptedPdfError.reason),
        "truncated": (truncated_pdf, CorruptPdfError.reason),
        "zero-pages": (zero_page_pdf, EmptyPdfError.reason),
        "html": (html_as_pdf, NotAPdfError.reason),
        "random-bytes": (random_bytes, NotAPdfError.reason),
        "empty-file": (empty_file, NotAPdfError.reason),
        "broken-xref": (broken_xref_pdf, CorruptPdfError.reason),
    }
)
"""Unusable samples by name, each with the ledger reason inspect_pdf reports for it."""

_CORPUS_KINDS: tuple[str, ...] = ("text", "image", "rotated", "scanned", "owner-locked")


def _corpus_document(kind: str, pages: int, seed: int, number: int) -> bytes:
    if kind == "text":
        return text_pdf(pages, title=f"Document {number}", seed=seed)
    if kind == "image":
        return image_pdf(pages, seed=seed)
    if kind == "rotated":
        return rotated_pdf(pages, seed=seed)
    if kind == "scanned":
        return scanned_pdf(pages, seed=seed)
    if kind == "owner-locked":
        return owner_locked_pdf(pages, seed=seed)
    raise ValueError(f"unknown sample kind {kind!r}")


def write_sample_corpus(
    directory: Path, *, good: int = 16, include_bad: bool = True, seed: int = 0
) -> list[Path]:
    """Write a mixed folder like a real drop and return the paths written, good ones first.

    `good` readable PDFs of 1-6 pages cycle through text, image, rotated, scanned and
    owner-locked; they are named `good-NN-<kind>-<P>p.pdf` (rotated ones have at least 2
    pages, so one page is turned). With `include_bad`, one file of each `BAD_SAMPLES` kind
    follows as `bad-<name>.pdf`; every file ends in .pdf, as in a real drop.
    """
    if good < 0:
        raise ValueError(f"good must be >= 0, got {good}")
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    written: list[Path] = []
    for number in range(good):
        kind = _CORPUS_KINDS[number % len(_CORPUS_KINDS)]
        pages = rng.randint(2 if kind == "rotated" else 1, 6)
        data = _corpus_document(kind, pages, rng.randrange(2**31), number)
        path = directory / f"good-{number:02d}-{kind}-{pages}p.pdf"
        path.write_bytes(data)
        written.append(path)
    if include_bad:
        for name, (make, _reason) in BAD_SAMPLES.items():
            path = directory / f"bad-{name}.pdf"
            path.write_bytes(make())
            written.append(path)
    return written
