"""Write a PDF object by object, for the files no PDF library will write on purpose.

`build_pdf` lays out numbered objects after a header, then a classic cross-reference
table with correct offsets and a trailer (PDF 1.7, sections 7.5.4-7.5.5), so each damage a
fuzz kind makes is the only one in the file.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence


def stream(entries: bytes, data: bytes, *, length: int | None = None) -> bytes:
    """A stream object's body: `<< entries /Length n >> stream ... endstream`."""
    n = len(data) if length is None else length
    return b"<< %s /Length %d >>\nstream\n%s\nendstream" % (entries, n, data)


def flate(entries: bytes, data: bytes) -> bytes:
    return stream(entries + b" /Filter /FlateDecode", zlib.compress(data))


def text_content(line: str) -> bytes:
    """A content stream that writes `line` in Helvetica 24 near the top of a letter page."""
    escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return b"BT /F1 24 Tf 72 700 Td (%s) Tj ET" % escaped.encode("latin-1")


FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
RESOURCES = b"<< /Font << /F1 %d 0 R >> >>"


def build_pdf(
    objects: Mapping[int, bytes],
    *,
    root: int = 1,
    version: bytes = b"1.7",
    trailer_extra: bytes = b"",
) -> bytes:
    """The PDF file holding `objects` (number -> body), with a correct xref table."""
    out = bytearray(b"%PDF-" + version + b"\n%\xe2\xe3\xcf\xd3\n")
    offsets: dict[int, int] = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, objects[number])
    size = max(objects) + 1
    xref_at = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        if number in offsets:
            out += b"%010d 00000 n \n" % offsets[number]
        else:
            out += b"0000000000 65535 f \n"
    out += b"trailer\n<< /Size %d /Root %d 0 R %s>>\n" % (size, root, trailer_extra)
    out += b"startxref\n%d\n%%%%EOF\n" % xref_at
    return bytes(out)


def one_page_pdf(line: str, *, media_box: bytes = b"[0 0 612 792]",
                 page_extra: bytes = b"", catalog_extra: bytes = b"",
                 extra_objects: Mapping[int, bytes] | None = None,
                 content: bytes | None = None) -> bytes:
    """Catalog 1, pages 2, page 3, content 4, font 5 (objects 6+ are the caller's)."""
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R %s>>" % catalog_extra,
        2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        3: b"<< /Type /Page /Parent 2 0 R /MediaBox %s /Contents 4 0 R /Resources %s %s>>"
        % (media_box, RESOURCES % 5, page_extra),
        4: content if content is not None else stream(b"", text_content(line)),
        5: FONT,
        **(extra_objects or {}),
    }
    return build_pdf(objects)


def pages_pdf(lines: Sequence[str]) -> bytes:
    """One letter page per line of text (catalog 1, pages 2, page/content pairs from 10)."""
    kids = b" ".join(b"%d 0 R" % (10 + 2 * n) for n in range(len(lines)))
    objects = {1: b"<< /Type /Catalog /Pages 2 0 R >>",
               2: b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(lines)), 5: FONT}
    for n, line in enumerate(lines):
        objects[10 + 2 * n] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                               b"/Contents %d 0 R /Resources " % (11 + 2 * n) + RESOURCES % 5 + b" >>")
        objects[11 + 2 * n] = stream(b"", text_content(line))
    return build_pdf(objects)
