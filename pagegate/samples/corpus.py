"""Named samples with what each should give, and a mixed folder of them like a real drop.

`BAD_SAMPLES` pairs each bad kind with the ledger reason reading it gives
(pagegate.pdf.document.open_pdf), and the tests hold the two to that.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from types import MappingProxyType

from pagegate.errors import CorruptPdfError, EmptyPdfError, EncryptedPdfError, NotAPdfError
from pagegate.samples.broken import (
    broken_xref_pdf,
    empty_file,
    html_as_pdf,
    random_bytes,
    truncated_pdf,
    zero_page_pdf,
)
from pagegate.samples.good import (
    encrypted_pdf,
    huge_page_pdf,
    image_pdf,
    owner_locked_pdf,
    rotated_pdf,
    scanned_pdf,
    text_pdf,
)

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
"""Unusable samples by name, each with the ledger reason reading it gives."""

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
