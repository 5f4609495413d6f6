"""Render throughput: the render pool at 1, 2 and 4 workers against olmOCR's pdftoppm path.

`python -m bench.render` prints pages/s at 1,288 px (longest side) over the same pages for:

- inproc-reopen: `render_page_png` in this process, the document opened again per page
  (the old single pdfium thread's path);
- inproc-open-once: the document opened once, every page rendered from it;
- pool-N: `RenderPool` with N worker processes, 2 x N pages in flight (inspection done
  first, so every worker has the documents open: steady state);
- pdftoppm: olmOCR's renderer, one `pdftoppm -png -scale-to 1288 -f P -l P` process per
  page (olmocr/data/renderpdf.py), one at a time: its pages/s per core. Skipped when
  poppler-utils is not installed (`apt-get install poppler-utils`).

There are no real-world PDFs in the repository, so the documents are made here, at bench
time: multi-page reportlab files like a book (text), a report (text and figures, A4) and
a slide deck (landscape, a photo-like picture per page), pages of mixed sizes. Figures
are medians of `--repeats` runs with the spread (min-max); pages/s per worker divides by N.
Read them on a quiet machine (`flock /tmp/pagegate-heavy.lock python -m bench.render`).

`--encoders` prints instead what each PNG encoder considered costs a page (ms, KB) on the
same rendered pixels: why pagegate/pdf/reader.py encodes with libpng and the Up filter.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import io
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import imagecodecs
import pypdfium2 as pdfium
from PIL import Image, ImageDraw, ImageFilter
from reportlab.lib.pagesizes import A4, landscape, letter
from reportlab.lib.utils import ImageReader, simpleSplit
from reportlab.pdfgen.canvas import Canvas

from pagegate.pdf.document import open_pdf
from pagegate.pdf.pool import PoolSettings, RenderPool
from pagegate.pdf.reader import render_page, render_page_png
from pagegate.pdf.wire import PdfSource
from pagegate.samples.good import paragraph

TARGET = 1288


def _photo(rng: random.Random, size: tuple[int, int]) -> Image.Image:
    """A photo-like picture: noise under blurred shapes (JPEG-compressed like a camera's)."""
    image = Image.effect_noise(size, 40).convert("RGB")
    draw = ImageDraw.Draw(image)
    for _ in range(12):
        x, y = rng.randrange(size[0]), rng.randrange(size[1])
        r = rng.randint(20, size[0] // 3)
        draw.ellipse((x - r, y - r, x + r, y + r),
                     fill=(rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    return image.filter(ImageFilter.GaussianBlur(2))


def _text_block(canvas: Canvas, rng: random.Random, x: float, top: float, width: float,
                bottom: float, size: float = 10.5) -> None:
    y = top
    while True:
        lines = simpleSplit(paragraph(rng), "Times-Roman", size, width)
        if y - len(lines) * size * 1.3 < bottom:
            return
        text = canvas.beginText(x, y)
        text.setFont("Times-Roman", size, size * 1.3)
        for line in lines:
            text.textLine(line)
        canvas.drawText(text)
        y -= (len(lines) + 1) * size * 1.3


def realistic_pdf(kind: str, pages: int, seed: int) -> bytes:
    """A multi-page document: "book" (letter, text), "report" (A4, text and figures) or
    "slides" (landscape letter, a title and a picture per page)."""
    rng = random.Random(seed)
    size = {"book": letter, "report": A4, "slides": landscape(letter)}[kind]
    out = io.BytesIO()
    canvas = Canvas(out, pagesize=size, invariant=1)
    width, height = size
    for number in range(1, pages + 1):
        canvas.setFont("Helvetica-Bold", 14)
        canvas.drawString(54, height - 54, f"{kind.title()} {seed}, page {number}")
        if kind == "slides":
            picture = _photo(rng, (800, 450))
            jpeg = io.BytesIO()
            picture.save(jpeg, "JPEG", quality=85)
            canvas.drawImage(ImageReader(io.BytesIO(jpeg.getvalue())), 72, 72,
                             width - 144, height - 180)
        elif kind == "report" and number % 2 == 0:
            picture = _photo(rng, (640, 400))
            canvas.drawImage(ImageReader(picture), 54, height / 2, width - 108, height / 2 - 90)
            _text_block(canvas, rng, 54, height / 2 - 20, width - 108, 54)
        else:
            _text_block(canvas, rng, 54, height - 80, width - 108, 54)
        canvas.showPage()
    canvas.save()
    return out.getvalue()


def corpus(scale: int) -> list[bytes]:
    return [realistic_pdf("book", 60 * scale, 1), realistic_pdf("report", 24 * scale, 2),
            realistic_pdf("slides", 16 * scale, 3)]


def _pages(docs: list[bytes]) -> list[tuple[int, int]]:
    out = []
    for d, data in enumerate(docs):
        with open_pdf(data) as pdf:
            out += [(d, p) for p in range(pdf.page_count)]
    return out


def inproc_reopen(docs: list[bytes]) -> float:
    pages = _pages(docs)
    start = time.perf_counter()
    for d, p in pages:
        render_page_png(docs[d], p, target_longest_dim=TARGET)
    return len(pages) / (time.perf_counter() - start)


def inproc_open_once(docs: list[bytes]) -> float:
    count, start = 0, time.perf_counter()
    for data in docs:
        with open_pdf(data) as pdf:
            for p in range(pdf.page_count):
                render_page(pdf, p, target_longest_dim=TARGET)
                count += 1
    return count / (time.perf_counter() - start)


def pool_rate(docs: list[bytes], workers: int) -> float:
    async def run() -> float:
        settings = PoolSettings(workers=workers, target_longest_dim=TARGET)
        async with RenderPool(settings) as pool:
            sources = [PdfSource(f"doc{d}", data=data) for d, data in enumerate(docs)]
            infos = await asyncio.gather(*(pool.inspect(s, password=None, max_pages=None)
                                           for s in sources))
            work = [(s, p) for s, info in zip(sources, infos, strict=True)
                    for p in range(info.page_count)]
            for s in sources:  # every worker opens every document before the clock starts
                await asyncio.gather(*(pool.render(s, 0, rotation=0) for _ in range(workers)))
            queue = list(reversed(work))

            async def lane() -> None:
                while queue:
                    source, page = queue.pop()
                    await pool.render(source, page, rotation=0)

            start = time.perf_counter()
            await asyncio.gather(*(lane() for _ in range(2 * workers)))
            return len(work) / (time.perf_counter() - start)

    return asyncio.run(run())


def pdftoppm_rate(docs: list[bytes], tmp: Path) -> float:
    paths = []
    for d, data in enumerate(docs):
        path = tmp / f"doc{d}.pdf"
        path.write_bytes(data)
        paths.append(path)
    pages = _pages(docs)
    start = time.perf_counter()
    for d, p in pages:
        subprocess.run(["pdftoppm", "-png", "-scale-to", str(TARGET), "-f", str(p + 1),
                        "-l", str(p + 1), str(paths[d]), str(tmp / "page")], check=True)
    return len(pages) / (time.perf_counter() - start)


def encoder_costs(docs: list[bytes]) -> dict[str, tuple[float, float]]:
    """ms and KB a page for each PNG encoder considered, on the same rendered pixels."""
    pixels = []
    for data in docs:
        pdf = pdfium.PdfDocument(data)
        for index in range(len(pdf)):
            page = pdf[index]
            scale = TARGET / max(page.get_size())
            pixels.append(page.render(scale=scale, rev_byteorder=True).to_numpy().copy())

    def pillow(array: Any) -> bytes:
        out = io.BytesIO()
        Image.fromarray(array).save(out, format="PNG", compress_level=1)
        return out.getvalue()

    def libpng(array: Any, *, filter_name: str, rle: bool = False) -> bytes:
        png = imagecodecs.PNG
        strategy = png.STRATEGY.RLE if rle else None
        return bytes(imagecodecs.png_encode(array, level=1, strategy=strategy,
                                            filter=getattr(png.FILTER, filter_name)))

    encoders: dict[str, Callable[[Any], bytes]] = {"pillow level 1": pillow}
    for name in ("NONE", "SUB", "UP", "PAETH"):
        encoders[f"libpng level 1 {name.lower()}"] = functools.partial(libpng, filter_name=name)
    encoders["libpng level 1 up rle"] = functools.partial(libpng, filter_name="UP", rle=True)
    costs = {}
    for name, encode in encoders.items():
        start, size = time.perf_counter(), 0
        for array in pixels:
            size += len(encode(array))
        costs[name] = (1000 * (time.perf_counter() - start) / len(pixels),
                       size / len(pixels) / 1024)
    return costs


def _summary(values: list[float]) -> str:
    return f"{statistics.median(values):7.1f}  ({min(values):.1f}-{max(values):.1f})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.render", description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--scale", type=int, default=1, help="multiply every document's pages")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--encoders", action="store_true",
                   help="instead: each PNG encoder's ms and KB a page on the same pixels")
    args = p.parse_args(argv)
    docs = corpus(args.scale)
    page_total = len(_pages(docs))
    print(f"{len(docs)} documents, {page_total} pages, {sum(map(len, docs)) / 2**20:.1f} MB, "
          f"rendered at {TARGET} px")
    if args.encoders:
        for name, (ms, kb) in encoder_costs(docs).items():
            print(f"{name:<24} {ms:6.1f} ms a page  {kb:5.0f} KB a page")
        return 0
    cases: dict[str, Callable[[], float]] = {
        "inproc-reopen": lambda: inproc_reopen(docs),
        "inproc-open-once": lambda: inproc_open_once(docs),
        **{f"pool-{n}": (lambda n=n: pool_rate(docs, n)) for n in args.workers},  # type: ignore[misc]
    }
    with tempfile.TemporaryDirectory(prefix="pagegate-render-") as tmp:
        if shutil.which("pdftoppm"):
            cases["pdftoppm"] = lambda: pdftoppm_rate(docs, Path(tmp))
        rates = {name: [case() for _ in range(args.repeats)] for name, case in cases.items()}
    base = statistics.median(rates["pool-1"]) if "pool-1" in rates else None
    print(f"{'path':<18} {'pages/s median (spread)':>24}  {'per worker':>10}  {'vs pool-1':>9}")
    for name, values in rates.items():
        workers = int(name.split("-")[1]) if name.startswith("pool-") else 1
        median = statistics.median(values)
        ratio = f"{median / base:.2f}x" if base else "-"
        print(f"{name:<18} {_summary(values):>24}  {median / workers:10.1f}  {ratio:>9}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
