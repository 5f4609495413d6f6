"""pagegate.pdf.document: pdfium first, pypdf when pdfium cannot; rejected only when neither
opens a file, with both libraries' errors in the message."""

from __future__ import annotations

import io

import pytest
from pypdf import PdfReader

from pagegate import samples
from pagegate.errors import CorruptPdfError, EncryptedPdfError, InputError
from pagegate.pdf.document import has_header, open_pdf
from pagegate.pdf.reader import page_text, render_page
from pagegate.samples import fuzz


@pytest.mark.parametrize("kind", ["cyclic-page-tree", "encrypted-attachment-only"])
def test_files_pypdf_refuses_are_documents_when_pdfium_opens_them(kind: str) -> None:
    data = fuzz.FUZZ_KINDS[kind].make()
    with pytest.raises(Exception):  # noqa: B017 (whatever pypdf raises)
        PdfReader(io.BytesIO(data)).pages[0].extract_text()
    with open_pdf(data) as pdf:
        assert pdf.info.engine == "pdfium" and pdf.page_count >= 1
        assert render_page(pdf, 0).height == 1288


def test_encryption_of_the_attachments_alone_needs_no_password() -> None:
    data = fuzz.encrypted_attachment_only("secret")
    assert PdfReader(io.BytesIO(data)).is_encrypted
    with open_pdf(data) as pdf:
        assert pdf.info.password is None
        assert page_text(pdf, 0) == "Only the attachment is encrypted"


def test_without_pdfium_the_text_layer_still_comes_from_pypdf() -> None:
    """What a file pdfium cannot open (or crashed on) gives: a document, text only."""
    with open_pdf(samples.text_pdf(3, title="Plain"), use_pdfium=False) as pdf:
        assert (pdf.info.engine, pdf.page_count) == ("pypdf", 3)
        assert page_text(pdf, 1).startswith("Plain page 2")
        with pytest.raises(CorruptPdfError, match="only its text layer"):
            render_page(pdf, 0)


def test_a_user_password_opens_through_either_library() -> None:
    data = samples.encrypted_pdf("pw")
    for use_pdfium in (True, False):
        with open_pdf(data, password="pw", use_pdfium=use_pdfium) as pdf:
            assert pdf.info.password == "pw" and pdf.page_count == 2
            assert page_text(pdf, 0).startswith("Encrypted page 1")
    with pytest.raises(EncryptedPdfError, match="no password"):
        open_pdf(data)


@pytest.mark.parametrize("kind", sorted(k for k, v in fuzz.FUZZ_KINDS.items()
                                        if v.expect.reason is not None))
def test_every_rejected_kind_names_both_libraries(kind: str) -> None:
    expected = fuzz.FUZZ_KINDS[kind].expect.reason
    with pytest.raises(InputError) as caught:
        open_pdf(fuzz.FUZZ_KINDS[kind].make(), source=kind)
    assert (caught.value.reason, caught.value.source) == (expected, kind)
    assert "pdfium: " in str(caught.value) and "pypdf: " in str(caught.value)


def test_the_header_window_is_1024_bytes() -> None:
    assert has_header(b"x" * 1019 + b"%PDF-1.4")
    assert not has_header(b"x" * 1020 + b"%PDF-1.4")


@pytest.mark.parametrize(
    ("data", "shown"),
    [
        (b"<!DOCTYPE html>\n<html>", r"starts with '<!DOCTYPE html>\n<html>'"),
        (bytes.fromhex("cd072cd8be6f9f62ac4c09c2") * 8, "starts with bytes cd 07 2c d8 be 6f 9f 62"),
    ],
    ids=["text", "binary"],
)
def test_a_non_pdf_says_how_it_starts_in_words_an_operator_reads(data: bytes, shown: str) -> None:
    with pytest.raises(InputError) as caught:
        open_pdf(data)
    assert caught.value.reason == "not_a_pdf" and shown in str(caught.value)
