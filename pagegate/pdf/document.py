"""Open a PDF with both libraries: pdfium first, pypdf when pdfium cannot.

A PDF is rejected only when neither library can open it, and the error then names what
each one said, so the ledger tells a damaged file from an unsupported one. The verdicts:

* **pdfium opens it** (and loads its first page): a document; its pages are rendered by pdfium. This includes files
  pypdf refuses (a missing `startxref`, cyclic page references, a stream cut short):
  pdfium rebuilds a damaged cross-reference table by scanning the file.
* **pdfium cannot, pypdf can**: a document whose pages cannot be rendered, only their text
  layer read (every page falls back and the document is flagged, never dropped silently).
* **neither**: `EncryptedPdfError` when either library said a password is needed (and
  pypdf does not see an unencrypted file), `EmptyPdfError` for zero pages,
  `NotAPdfError` when there is no `%PDF-` header in the first 1,024 bytes, else
  `CorruptPdfError`.

Encryption means "a password is needed to render pages", as pdfium sees it: a file whose
encryption covers only its embedded files, or that has only an owner password, opens
with no password and is a plain document here, whatever its /Encrypt dictionary says.

A file without `%PDF-` in its first 1,024 bytes (the window PDF 1.7 Annex H note 13 and
both libraries allow) is given a `%PDF-1.7` header line before pdfium sees it: pdfium
rebuilds the offsets, so a body whose header was lost or pushed back by junk (a proxy's
HTTP headers, a BOM) still opens. HTML, images and archives have no objects to find and
still fail, as `not_a_pdf`.

pdfium is not thread-safe: an `OpenPdf` belongs to one thread (pagegate.pdf.worker runs
each in its own process). pypdf is pure Python and safe in any thread.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError, WrongPasswordError

from pagegate.errors import (
    CorruptPdfError,
    EmptyPdfError,
    EncryptedPdfError,
    InputError,
    NotAPdfError,
)
from pagegate.pdf.wire import PdfInfo

__all__ = ["OpenPdf", "PdfInfo", "PdfInput", "open_pdf"]

logger = logging.getLogger(__name__)

HEADER = b"%PDF-"
HEADER_WINDOW = 1024
ADDED_HEADER = b"%PDF-1.7\n"

PdfInput = bytes | Path
"""The bytes of a PDF, or the path of a file holding them."""


def has_header(head: bytes) -> bool:
    """True when `%PDF-` lies within the first 1,024 bytes."""
    return HEADER in head[:HEADER_WINDOW]


def _read(data: PdfInput) -> bytes:
    return data if isinstance(data, bytes) else data.read_bytes()


def _head(data: PdfInput) -> bytes:
    if isinstance(data, bytes):
        return data[: HEADER_WINDOW + 8]
    with data.open("rb") as f:
        return f.read(HEADER_WINDOW + 8)


def _is_password_error(exc: pdfium.PdfiumError) -> bool:
    return exc.err_code in (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, pdfium.PdfiumError):
        text = str(exc).removeprefix("Failed to load document ").strip("().")
        return text.removeprefix("PDFium: ") or "error"
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


class OpenPdf:
    """One PDF held open: a pdfium document when pdfium could open it, and (lazily) a
    pypdf reader for its text layer when it could not. Close it when done."""

    def __init__(
        self,
        data: PdfInput,
        *,
        pdfium_doc: pdfium.PdfDocument | None,
        pdfium_error: str | None,
        reader: PdfReader | None,
        info: PdfInfo,
    ) -> None:
        self._data = data
        self.pdfium = pdfium_doc
        self.pdfium_error = pdfium_error
        self._reader = reader
        self.info = info

    @property
    def page_count(self) -> int:
        return self.info.page_count

    def pypdf_reader(self) -> PdfReader:
        """pypdf's reader of the same file (opened on first use)."""
        if self._reader is None:
            self._reader = _open_reader(self._data, self.info.password)
        return self._reader

    def close(self) -> None:
        if self.pdfium is not None:
            self.pdfium.close()
            self.pdfium = None
        self._reader = None

    def __enter__(self) -> OpenPdf:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_pdf(
    data: PdfInput,
    *,
    password: str | None = None,
    use_pdfium: bool = True,
    source: str | None = None,
) -> OpenPdf:
    """Open `data` with pdfium, else pypdf; raise an InputError naming both when neither can.

    `password` is tried only where the file needs one (a run-wide password must not break
    the PDFs that need none). `use_pdfium=False` skips pdfium (a file that crashed it).
    Zero pages raise EmptyPdfError. pypdf's DependencyError (a missing crypto package) is a
    broken installation, not a bad input, and propagates.
    """
    header = has_header(_head(data))
    pdfium_error = "not tried (it crashed or hung on this file)"
    password_needed = False
    if use_pdfium:
        try:
            doc, used, added = _open_pdfium(data, password, header)
        except pdfium.PdfiumError as exc:
            pdfium_error = _describe(exc)
            password_needed = _is_password_error(exc)
        else:
            pages = len(doc)
            refusal = _first_page_error(doc) if pages > 0 else "no pages"
            if refusal is None:
                info = PdfInfo(page_count=pages, password=used, header_added=added)
                return OpenPdf(data, pdfium_doc=doc, pdfium_error=None, reader=None, info=info)
            doc.close()
            pdfium_error = refusal
    try:
        reader = _open_reader(data, password)
        page_count = len(reader.pages)
    except DependencyError:
        raise
    except (FileNotDecryptedError, WrongPasswordError) as exc:
        hint = "the password given is wrong" if password else "no password was given"
        raise EncryptedPdfError(
            f"encrypted PDF, {hint} (pdfium: {pdfium_error}; pypdf: {_describe(exc)})",
            source=source,
        ) from exc
    except Exception as exc:
        # On garbage pypdf raises its own errors but also ValueError, KeyError,
        # UnicodeDecodeError, RecursionError...: anything here means "cannot be parsed".
        # Certificate (PubSec) encryption is NotImplementedError("only Standard PDF
        # encryption handler is available").
        pypdf_error = _describe(exc)
        both = f"pdfium: {pdfium_error}; pypdf: {pypdf_error}"
        error: InputError
        if password_needed or (isinstance(exc, NotImplementedError) and "encrypt" in str(exc)):
            hint = "the password given is wrong" if password else "no password was given"
            error = EncryptedPdfError(f"encrypted PDF, {hint} ({both})", source=source)
        elif not header:
            error = NotAPdfError(_not_a_pdf(data, both), source=source)
        else:
            error = CorruptPdfError(f"cannot open PDF ({both})", source=source)
        raise error from exc
    if page_count == 0:
        both = f"pdfium: {pdfium_error}; pypdf: no pages"
        if not header:
            raise NotAPdfError(_not_a_pdf(data, both), source=source)
        raise EmptyPdfError(f"PDF has no pages ({both})", source=source)
    logger.info("%s: pdfium cannot open it (%s); pypdf reads %d pages (text layer only)",
                source, pdfium_error, page_count)
    info = PdfInfo(page_count=page_count, engine="pypdf",
                   password=password if password and reader.is_encrypted else None)
    return OpenPdf(data, pdfium_doc=None, pdfium_error=pdfium_error, reader=reader, info=info)


def _first_page_error(doc: pdfium.PdfDocument) -> str | None:
    """Why pdfium cannot load the first page (a page tree it cannot walk), or None.

    A document whose page tree pdfium cannot walk is no document pdfium renders, however
    many pages its /Count claims: then pypdf has its say.
    """
    try:
        page = doc[0]
    except pdfium.PdfiumError as exc:
        return f"opened, but cannot load page 1 ({exc})"
    page.close()
    return None


def _not_a_pdf(data: PdfInput, both: str) -> str:
    head = _head(data)
    if not head:
        return f"not a PDF: the file is empty ({both})"
    return (f"not a PDF: no {HEADER.decode()} header in the first {HEADER_WINDOW} bytes "
            f"(starts with {_describe_start(head)}) and no PDF body ({both})")


def _describe_start(head: bytes) -> str:
    """The file's first bytes as an operator reads them: text as text, binary as hex."""
    start = head[:40]
    printable = sum(32 <= b < 127 or b in b"\t\r\n" for b in start)
    if printable >= 0.9 * len(start):
        return repr(start.decode("ascii", "replace"))
    return "bytes " + start[:8].hex(" ")


def _open_pdfium(
    data: PdfInput, password: str | None, header: bool
) -> tuple[pdfium.PdfDocument, str | None, bool]:
    """(document, the password it needed, whether a header was put in front)."""
    raw: bytes | str = str(data) if isinstance(data, Path) else data
    if not header:
        raw = ADDED_HEADER + _read(data)
    try:
        return pdfium.PdfDocument(raw), None, not header
    except pdfium.PdfiumError as exc:
        if not (password and _is_password_error(exc)):
            raise
    return pdfium.PdfDocument(raw, password=password), password, not header


def _open_reader(data: PdfInput, password: str | None) -> PdfReader:
    """A pypdf reader, decrypted with `password` only where the file needs it.

    pypdf refuses a password for an unencrypted file, and an owner-locked file opens with
    the empty user password that pypdf tries by itself. So the password is tried only on
    an encrypted file, and when it does not match, the file is left to pypdf's own
    empty-password attempt.
    """
    stream = io.BytesIO(data) if isinstance(data, bytes) else data.open("rb")
    reader = PdfReader(stream, strict=False)
    if password and reader.is_encrypted:
        if reader.decrypt(password) != PasswordType.NOT_DECRYPTED:
            return reader
        stream.seek(0)
        reader = PdfReader(stream, strict=False)
    return reader
