"""Estimate a PDF's page count from its object size, fitted on a small sample.

A planner facing millions of keys cannot open every PDF to count pages (that is a full
download of the collection). The listing already gives each object's size, so pages are
estimated as `size x pages_per_byte`, where `pages_per_byte` is fitted on a few dozen
PDFs that are actually read and counted.

The fit is a ratio estimator, sum(pages) / sum(bytes): it is the least-biased choice for
the *total* (the sum of estimates over the sample equals the true sum), and the total is
what a shard's size, and so its run time, depends on. Per-PDF estimates are rough (a
scan and a born-digital PDF differ by 10-100x in bytes per page); shards of hundreds of
PDFs average that out.

How good is it? `leave_one_out` predicts each sampled PDF from the others: its total
error is the error one should expect on a job total the size of the sample, its per-PDF
median shows how rough single estimates are. Which PDFs are sampled is decided by a hash
of the URI, so two planners listing the same keys draw the same sample, fit the same
model and cut the same shards (pagegate.scale.shards).

Pure: no I/O. The planner reads the sampled PDFs (pagegate.scale.plan).
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_BYTES_PER_PAGE = 100_000.0
"""Used when nothing could be sampled. A guess between born-digital text PDFs (a few KB
per page) and 300-dpi scans (a few hundred KB per page); say `bytes_per_page` when known."""


@dataclass(frozen=True)
class SizedPdf:
    """A sampled PDF: its listed size and its counted pages."""

    size: int
    pages: int


@dataclass(frozen=True)
class PageModel:
    """pages ~ size x pages_per_byte, at least one page per PDF."""

    pages_per_byte: float
    sample_pdfs: int = 0

    @classmethod
    def from_bytes_per_page(cls, bytes_per_page: float) -> PageModel:
        if bytes_per_page <= 0:
            raise ValueError("bytes_per_page must be positive")
        return cls(1.0 / bytes_per_page)

    def estimate(self, size: int | None) -> int:
        """Estimated pages of one PDF; an unknown or empty size counts as one page."""
        if not size or size <= 0:
            return 1
        return max(1, round(size * self.pages_per_byte))


@dataclass(frozen=True)
class EstimateError:
    """Leave-one-out error of the fit on its own sample (see the module docstring)."""

    pdfs: int
    total_relative_error: float  # |sum(est) - sum(true)| / sum(true)
    median_relative_error: float  # median over PDFs of |est - true| / true


def fit_page_model(sample: Sequence[SizedPdf]) -> PageModel:
    """The ratio estimator over the usable sample; the default model if there is none."""
    usable = [s for s in sample if s.size > 0 and s.pages > 0]
    total_bytes = sum(s.size for s in usable)
    if not usable or total_bytes == 0:
        return PageModel(1.0 / DEFAULT_BYTES_PER_PAGE, 0)
    return PageModel(sum(s.pages for s in usable) / total_bytes, len(usable))


def leave_one_out(sample: Sequence[SizedPdf]) -> EstimateError | None:
    """Predict each sampled PDF from a model fitted on the others; None below 2 PDFs."""
    usable = [s for s in sample if s.size > 0 and s.pages > 0]
    if len(usable) < 2:
        return None
    total_pages = sum(s.pages for s in usable)
    total_bytes = sum(s.size for s in usable)
    estimates: list[int] = []
    for s in usable:
        rest_bytes = total_bytes - s.size
        model = PageModel((total_pages - s.pages) / rest_bytes if rest_bytes else 0.0)
        estimates.append(model.estimate(s.size))
    per_pdf = [abs(e - s.pages) / s.pages for e, s in zip(estimates, usable, strict=True)]
    return EstimateError(
        pdfs=len(usable),
        total_relative_error=abs(sum(estimates) - total_pages) / total_pages,
        median_relative_error=statistics.median(per_pdf),
    )


def sample_rank(uri: str) -> float:
    """A uniform number in [0, 1) fixed by the URI: the PDF is sampled if it is small."""
    digest = hashlib.sha1(b"sample\n" + uri.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64
