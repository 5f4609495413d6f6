"""pagegate.samples: each generator makes what it says, deterministically, and the corpus
folder holds the advertised mix with the advertised ledger reasons."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pypdfium2 as pdfium
import pytest
from pypdf import PdfReader

from pagegate import samples
from pagegate.errors import InputError
from pagegate.pdf.reader import inspect_pdf


def _reason(data: bytes) -> str | None:
    try:
        inspect_pdf(data)
    except InputError as exc:
        return exc.reason
    return None


def _reader(data: bytes) -> PdfReader:
    return PdfReader(io.BytesIO(data))


@pytest.mark.parametrize("name", sorted(samples.GOOD_SAMPLES))
def test_good_samples_are_deterministic_and_readable(name: str) -> None:
    make = samples.GOOD_SAMPLES[name]
    assert make() == make()
    assert _reason(make()) is None


@pytest.mark.parametrize("name", sorted(samples.BAD_SAMPLES))
def test_bad_samples_are_deterministic_and_give_their_reason(name: str) -> None:
    make, reason = samples.BAD_SAMPLES[name]
    assert make() == make()
    assert _reason(make()) == reason


def test_bad_samples_cover_every_kind_with_the_ledger_reasons() -> None:
    assert {name: reason for name, (_, reason) in samples.BAD_SAMPLES.items()} == {
        "encrypted": "encrypted",
        "truncated": "unreadable",
        "zero-pages": "zero_pages",
        "html": "not_a_pdf",
        "random-bytes": "not_a_pdf",
        "empty-file": "not_a_pdf",
        "broken-xref": "unreadable",
    }


def test_text_pdf_puts_title_page_n_on_page_n() -> None:
    reader = _reader(samples.text_pdf(4, title="Memo", seed=3))
    texts = [page.extract_text() for page in reader.pages]
    for number, text in enumerate(texts, start=1):
        assert text.startswith(f"Memo page {number}")
    assert len({text.split("\n", 1)[1] for text in texts}) == 4  # bodies differ too


def test_text_pdf_seed_changes_the_text() -> None:
    assert samples.text_pdf(2, seed=1) != samples.text_pdf(2, seed=2)
    with pytest.raises(ValueError):
        samples.text_pdf(0)


def test_image_pdf_has_a_raster_image_and_a_caption() -> None:
    page = _reader(samples.image_pdf()).pages[0]
    assert len(page.images) == 1
    assert page.extract_text().strip() == "Figure 1: shapes over a gradient, sample 0"


def test_scanned_pdf_is_an_image_without_a_text_layer() -> None:
    reader = _reader(samples.scanned_pdf(2))
    assert [len(page.images) for page in reader.pages] == [1, 1]
    assert [page.extract_text().strip() for page in reader.pages] == ["", ""]


def test_rotated_pdf_turns_only_page_two() -> None:
    pages = _reader(samples.rotated_pdf()).pages
    assert [page.rotation for page in pages] == [0, 90]
    assert [tuple(page.mediabox) for page in pages] == [(0, 0, 612, 792)] * 2
    assert [page.rotation for page in _reader(samples.rotated_pdf(5)).pages] == [0, 90, 0, 90, 0]


def test_encrypted_pdf_needs_its_user_password() -> None:
    reader = _reader(samples.encrypted_pdf("s3cret"))
    assert reader.is_encrypted
    assert reader.decrypt("s3cret").name == "USER_PASSWORD"
    assert "Encrypted page 1" in reader.pages[0].extract_text()


def test_owner_locked_pdf_is_encrypted_yet_opens_without_password() -> None:
    reader = _reader(samples.owner_locked_pdf())
    assert reader.is_encrypted
    assert "Owner locked page 2" in reader.pages[1].extract_text()


def test_zero_page_pdf_is_a_valid_empty_page_tree() -> None:
    reader = _reader(samples.zero_page_pdf())
    root: Any = reader.trailer["/Root"]
    assert root["/Pages"]["/Count"] == 0
    assert len(reader.pages) == 0


def test_truncated_pdf_is_the_first_half_of_a_real_pdf() -> None:
    whole = samples.text_pdf(4, title="Truncated")
    cut = samples.truncated_pdf()
    assert whole.startswith(cut)
    assert len(cut) == len(whole) // 2
    assert _reason(whole) is None


def test_html_and_noise_and_empty() -> None:
    assert samples.html_as_pdf().startswith(b"<!DOCTYPE html>")
    assert samples.empty_file() == b""
    noise = samples.random_bytes(1000, seed=5)
    assert len(noise) == 1000
    assert noise != samples.random_bytes(1000, seed=6)
    assert b"%PDF-" not in samples.random_bytes()


def test_broken_xref_pdf_defeats_both_readers() -> None:
    data = samples.broken_xref_pdf()
    assert data.startswith(b"%PDF-1.5\n")
    assert b"/Type /ObjStm" in data
    assert _reason(data) == "unreadable"
    with pytest.raises(pdfium.PdfiumError):
        pdfium.PdfDocument(data)


def test_garbling_a_classic_xref_table_would_not_be_enough() -> None:
    """Why broken_xref_pdf uses an object stream: both readers rebuild a plain xref table."""
    data = samples.text_pdf(2)
    start = data.rindex(b"xref")
    garbled = data[:start] + b"\xa5" * (len(data) - start - 20) + b"\nstartxref\n1\n%%EOF\n"
    assert inspect_pdf(garbled).page_count == 2
    document = pdfium.PdfDocument(garbled)
    try:
        assert len(document) == 2
    finally:
        document.close()


def test_huge_page_is_200_inches_square() -> None:
    page = _reader(samples.huge_page_pdf()).pages[0]
    assert tuple(page.mediabox) == (0, 0, 14400, 14400)


# --- write_sample_corpus -------------------------------------------------------------------

_GOOD_NAME = re.compile(r"good-(\d\d)-([a-z-]+)-(\d)p\.pdf")


def test_corpus_has_the_good_and_bad_files_it_advertises(tmp_path: Path) -> None:
    paths = samples.write_sample_corpus(tmp_path / "drop", good=10, seed=4)
    assert sorted(p.name for p in (tmp_path / "drop").iterdir()) == sorted(p.name for p in paths)
    assert len(paths) == 10 + len(samples.BAD_SAMPLES)
    assert all(path.suffix == ".pdf" for path in paths)

    kinds = []
    for path in paths[:10]:
        match = _GOOD_NAME.fullmatch(path.name)
        assert match, path.name
        kinds.append(match[2])
        pages = int(match[3])
        assert 1 <= pages <= 6
        assert inspect_pdf(path.read_bytes()).page_count == pages
    assert kinds == ["text", "image", "rotated", "scanned", "owner-locked"] * 2

    for path in paths[10:]:
        name = path.name.removeprefix("bad-").removesuffix(".pdf")
        assert _reason(path.read_bytes()) == samples.BAD_SAMPLES[name][1]
    assert {p.name for p in paths[10:]} == {f"bad-{n}.pdf" for n in samples.BAD_SAMPLES}


def test_corpus_rotated_files_have_a_turned_page(tmp_path: Path) -> None:
    paths = samples.write_sample_corpus(tmp_path, good=15, include_bad=False, seed=1)
    rotated = [path for path in paths if "-rotated-" in path.name]
    assert len(rotated) == 3
    for path in rotated:
        assert 90 in [page.rotation for page in _reader(path.read_bytes()).pages]


def test_corpus_is_reproducible_per_seed(tmp_path: Path) -> None:
    def contents(directory: Path, seed: int) -> dict[str, bytes]:
        paths = samples.write_sample_corpus(directory, good=6, seed=seed)
        return {path.name: path.read_bytes() for path in paths}

    first = contents(tmp_path / "a", 0)
    assert contents(tmp_path / "b", 0) == first
    assert contents(tmp_path / "c", 9) != first


def test_corpus_without_bad_files_or_without_good_ones(tmp_path: Path) -> None:
    only_good = samples.write_sample_corpus(tmp_path / "good", good=3, include_bad=False)
    assert [p.name.startswith("good-") for p in only_good] == [True] * 3
    only_bad = samples.write_sample_corpus(tmp_path / "bad", good=0)
    assert len(only_bad) == len(samples.BAD_SAMPLES)
    with pytest.raises(ValueError):
        samples.write_sample_corpus(tmp_path / "x", good=-1)
