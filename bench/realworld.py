"""A real-world-like drop of PDFs, made at bench time: what a public corpus throws at a run.

There is no real-world corpus in the repository, so `write_drop(folder, count)` writes
`count` files cycling through a fixed set of distinct documents, each a kind that costs
memory somewhere real files do:

- scan-300dpi:  one letter page scanned at 300 dpi (a 2,550 x 3,300 noisy JPEG, ~3 MB);
- small-objects: thousands of small indirect objects (4,000 form XObjects on one page);
- deep-tree:    a page tree 400 /Pages levels deep;
- many-pages:   a 60-page book;
- fonts:        two pages set in embedded TrueType fonts (subsets of DejaVu/Liberation);
- broken-xref:  cross-reference tables and trailers with flipped bytes, truncated
                downloads, an unrecoverable xref stream (some of these end in the ledger);
- text, report: the ordinary bulk, one to four pages of text, some with photos.

About 2.7 pages and 120 KB per file on average (the public corpus behind this benchmark
averaged 90 KB). Deterministic: the same count gives the same bytes.
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable
from functools import partial
from pathlib import Path

from PIL import Image
from reportlab.lib.pagesizes import letter
from reportlab.lib.utils import ImageReader
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.pdfgen.canvas import Canvas

from bench.render import realistic_pdf
from pagegate import samples
from pagegate.samples import fuzz
from pagegate.samples.good import paragraph
from pagegate.samples.raw import FONT, build_pdf, stream

FONT_FILES = ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
              "/usr/share/fonts/truetype/liberation/LiberationSerif-Regular.ttf")


def noise_scan(pages: int, *, dpi: int, quality: int, lift: int, seed: int) -> bytes:
    """Scanner output without a text layer: each page a noisy light-grey letter-size JPEG
    at `dpi` (noise sigma `seed` + page number, lifted by `lift` grey levels)."""
    out = io.BytesIO()
    canvas = Canvas(out, pagesize=letter, invariant=1)
    for number in range(pages):
        noise = Image.effect_noise((int(8.5 * dpi), 11 * dpi), seed + number)
        jpeg = io.BytesIO()
        noise.point(lambda v: min(255, v + lift)).convert("L").save(jpeg, "JPEG", quality=quality)
        canvas.drawImage(ImageReader(io.BytesIO(jpeg.getvalue())), 0, 0, *letter)
        canvas.showPage()
    canvas.save()
    return out.getvalue()


def scan_300dpi(seed: int) -> bytes:
    """One letter page as a 300 dpi office scanner writes it: grey noise, JPEG q85."""
    return noise_scan(1, dpi=300, quality=85, lift=100, seed=10 + seed)


def small_objects(objects: int = 4000) -> bytes:
    """One page drawing `objects` tiny form XObjects, each its own indirect object."""
    names = b" ".join(b"/X%d %d 0 R" % (n, 100 + n) for n in range(objects))
    draw = b"".join(b"q 1 0 0 1 %d %d cm /X%d Do Q\n" % (20 + (n % 57) * 10, 20 + (n // 57) * 10, n)
                    for n in range(objects))
    found = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        3: (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /Font << /F1 5 0 R >> /XObject << %s >> >> >>" % names),
        4: stream(b"", draw + b"BT /F1 12 Tf 72 760 Td (Thousands of objects) Tj ET"),
        5: FONT,
    }
    for n in range(objects):
        found[100 + n] = stream(b"/Type /XObject /Subtype /Form /BBox [0 0 8 8]",
                                b"0 0 8 8 re f")
    return build_pdf(found)


def embedded_fonts(seed: int) -> bytes:
    """Two pages of text set in TrueType fonts reportlab embeds (as subsets)."""
    rng = random.Random(seed)
    out = io.BytesIO()
    canvas = Canvas(out, pagesize=letter, invariant=1)
    fonts = []
    for path in FONT_FILES:
        name = Path(path).stem
        if name not in pdfmetrics.getRegisteredFontNames():
            pdfmetrics.registerFont(TTFont(name, path))
        fonts.append(name)
    for number in range(2):
        y = 740
        for line in range(40):
            canvas.setFont(fonts[(line + number) % len(fonts)], 10)
            canvas.drawString(54, y, paragraph(rng)[:95])
            y -= 17
        canvas.showPage()
    canvas.save()
    return out.getvalue()


def distinct_documents() -> list[tuple[str, Callable[[], bytes]]]:
    """The cycle of (kind, maker): 50 entries, so a kind's share is its count / 50."""
    kinds: list[tuple[str, Callable[[], bytes]]] = [
        ("scan-300dpi", partial(scan_300dpi, 0)),
        ("small-objects", small_objects),
        ("deep-tree", partial(fuzz.deep_page_tree, 400)),
        ("many-pages", partial(realistic_pdf, "book", 60, 7)),
    ]
    kinds += [("fonts", partial(embedded_fonts, s)) for s in range(3)]
    kinds += [("broken-xref", partial(fuzz.xref_flipped, s)) for s in range(2)]
    kinds += [("broken-xref", partial(fuzz.trailer_flipped, s)) for s in range(2)]
    kinds += [("broken-xref", partial(fuzz.truncated_at_random, s)) for s in range(2)]
    kinds += [("broken-xref", samples.broken_xref_pdf)]
    kinds += [("report", partial(realistic_pdf, "report", 2, s)) for s in range(6)]
    kinds += [("text", partial(samples.text_pdf, 1 + s % 4, title=f"T{s}", seed=s))
              for s in range(30)]
    return kinds


def write_drop(folder: Path, count: int) -> dict[str, int]:
    """Write `count` PDFs into `folder`; returns the files per kind."""
    folder.mkdir(parents=True, exist_ok=True)
    made = [(kind, make()) for kind, make in distinct_documents()]
    per_kind: dict[str, int] = {}
    for n in range(count):
        kind, data = made[n % len(made)]
        (folder / f"{n:06d}-{kind}.pdf").write_bytes(data)
        per_kind[kind] = per_kind.get(kind, 0) + 1
    return per_kind
