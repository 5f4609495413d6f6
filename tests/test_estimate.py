"""The page estimate: the ratio fit, its leave-one-out error, the sample, range reads."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from pagegate import samples
from pagegate.io.range_read import RangeFile, ranged_page_count
from pagegate.scale.estimate import (
    DEFAULT_BYTES_PER_PAGE,
    PageModel,
    SizedPdf,
    fit_page_model,
    leave_one_out,
    sample_rank,
)


def test_the_fit_is_total_pages_over_total_bytes() -> None:
    model = fit_page_model([SizedPdf(1_000, 3), SizedPdf(9_000, 7), SizedPdf(0, 5), SizedPdf(50, 0)])
    assert model.pages_per_byte == pytest.approx(10 / 10_000)
    assert model.sample_pdfs == 2  # empty objects and uncountable PDFs do not count


def test_without_a_usable_sample_the_default_ratio_is_used() -> None:
    assert fit_page_model([]).pages_per_byte == pytest.approx(1 / DEFAULT_BYTES_PER_PAGE)
    assert fit_page_model([SizedPdf(0, 4)]).sample_pdfs == 0


@pytest.mark.parametrize(
    ("size", "pages"), [(None, 1), (0, 1), (-5, 1), (10, 1), (149_999, 1), (150_000, 2), (1_049_999, 10)]
)
def test_an_estimate_is_rounded_and_at_least_one_page(size: int | None, pages: int) -> None:
    assert PageModel.from_bytes_per_page(100_000).estimate(size) == pages


def test_bytes_per_page_must_be_positive() -> None:
    with pytest.raises(ValueError):
        PageModel.from_bytes_per_page(0)


def test_leave_one_out_is_exact_on_a_proportional_sample() -> None:
    error = leave_one_out([SizedPdf(1_000, 10), SizedPdf(2_000, 20), SizedPdf(3_000, 30)])
    assert error is not None
    assert (error.pdfs, error.total_relative_error, error.median_relative_error) == (3, 0.0, 0.0)


def test_leave_one_out_numbers() -> None:
    # Each PDF predicted from the other: 1000 B -> 30 pages (true 10), 1000 B -> 10 (true 30).
    error = leave_one_out([SizedPdf(1_000, 10), SizedPdf(1_000, 30)])
    assert error is not None
    assert error.total_relative_error == pytest.approx(0.0)  # 40 estimated, 40 true
    assert error.median_relative_error == pytest.approx((2.0 + 2 / 3) / 2)
    skewed = leave_one_out([SizedPdf(1_000, 10), SizedPdf(1_000, 10), SizedPdf(2_000, 40)])
    assert skewed is not None  # 10, 10 and 40 predicted as 17, 17 and 20
    assert skewed.total_relative_error == pytest.approx(abs(54 - 60) / 60)


def test_leave_one_out_needs_two_pdfs() -> None:
    assert leave_one_out([SizedPdf(1_000, 10)]) is None
    assert leave_one_out([SizedPdf(1_000, 10), SizedPdf(0, 3)]) is None


def test_the_sample_rank_is_fixed_by_the_uri_and_spread_over_0_1() -> None:
    ranks = [sample_rank(f"s3://b/doc{i}.pdf") for i in range(4_000)]
    assert ranks == [sample_rank(f"s3://b/doc{i}.pdf") for i in range(4_000)]
    assert all(0.0 <= r < 1.0 for r in ranks)
    assert 0.2 < sum(r < 0.25 for r in ranks) / len(ranks) < 0.3


# ----------------------------------------------------------------------------- range reads


def test_a_range_file_reads_like_bytes_and_fetches_each_block_once() -> None:
    data = bytes(range(256)) * 40  # 10,240 bytes
    fetches: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        fetches.append((start, end))
        return data[start:end]

    f = RangeFile(fetch, len(data), block=1_000)
    assert f.read(10) == data[:10]
    f.seek(-5, io.SEEK_END)
    assert f.read() == data[-5:]
    f.seek(995)
    assert f.read(10) == data[995:1005] and f.tell() == 1005
    f.seek(2, io.SEEK_CUR)
    assert f.read(3) == data[1007:1010]
    assert fetches == [(0, 1_000), (10_000, 10_240), (1_000, 2_000)]
    assert f.fetched == 2_240


def test_a_big_pdf_s_page_count_costs_a_few_blocks(s3_bucket: str, s3_client: Any) -> None:
    scan = samples.scanned_pdf(40)
    s3_client.put_object(Bucket=s3_bucket, Key="scan.pdf", Body=scan)
    pages, fetched = ranged_page_count(f"s3://{s3_bucket}/scan.pdf", len(scan), s3_client=s3_client)
    assert pages == 40
    assert fetched <= 3 * 64 * 1024 < len(scan) / 4


@pytest.mark.parametrize(
    ("make", "pages"),
    [(lambda: samples.text_pdf(3), 3), (lambda: samples.rotated_pdf(2), 2),
     (samples.truncated_pdf, None), (samples.html_as_pdf, None), (samples.empty_file, None)],
)
def test_declared_pages(make: Any, pages: int | None, tmp_path: Path) -> None:
    path = tmp_path / "x.pdf"
    path.write_bytes(make())
    assert ranged_page_count(str(path), path.stat().st_size, s3_client=None)[0] == pages
