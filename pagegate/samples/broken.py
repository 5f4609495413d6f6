"""Unusable sample PDFs: each one fails in its own way, with its own ledger reason.

`broken_xref_pdf` is a PDF 1.5 file whose objects live in a compressed object stream and
whose cross-reference stream is garbage. Damaging a classic `xref` table is not enough:
pypdf and pdfium both rebuild it by scanning for `N 0 obj`. Objects inside an object stream
cannot be found by scanning, so neither library can recover the catalog.
The fuzz kinds (pagegate.samples.fuzz) build on these.
"""

from __future__ import annotations

import io
import random
import zlib

from pypdf import PdfWriter

from pagegate.samples.good import text_pdf


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
