"""Sample PDFs made on the fly, good and bad, for `pagegate demo`, tests and benchmarks.

good (readable documents), broken (one way of failing each), corpus (named samples and a
mixed folder like a real drop), raw (an object-by-object PDF writer) and fuzz (the fuzz
corpus: over twenty kinds of odd, damaged and hostile files, each with its expected
outcome). Everything is deterministic: the same arguments give the same bytes.
"""

from pagegate.samples.broken import (
    broken_xref_pdf,
    empty_file,
    html_as_pdf,
    random_bytes,
    truncated_pdf,
    zero_page_pdf,
)
from pagegate.samples.corpus import BAD_SAMPLES, GOOD_SAMPLES, write_sample_corpus
from pagegate.samples.good import (
    encrypted_pdf,
    huge_page_pdf,
    image_pdf,
    owner_locked_pdf,
    rotated_pdf,
    scanned_pdf,
    text_pdf,
)

__all__ = [
    "BAD_SAMPLES", "GOOD_SAMPLES", "broken_xref_pdf", "empty_file", "encrypted_pdf",
    "html_as_pdf", "huge_page_pdf", "image_pdf", "owner_locked_pdf", "random_bytes",
    "rotated_pdf", "scanned_pdf", "text_pdf", "truncated_pdf", "write_sample_corpus",
    "zero_page_pdf",
]
