"""The fuzz corpus: odd, damaged and hostile files, each kind with its expected outcome.

Made at test time, never shipped. `FUZZ_KINDS` maps a kind to its maker and `Expect`:
a document of N pages (`fallback`: every page falls back to its text layer, so the
document is flagged), a ledger record with a reason, or `oracle`: random damage, where
the outcome is "a document exactly when pdfium opens the file" (pagegate.pdf.document).
Expectations hold with `pdf_password=None` and render workers limited to 256 MB of
address space (`BOMB_LIMIT_MB`): the content bomb is a bomb only under a limit.

Kinds that share a reason, and why they are kept apart all the same:

* `not_a_pdf`: png, jpeg, zip-deflated, gzip, empty, html, random-bytes. No PDF objects
  anywhere, whatever the header says; each library fails differently on each (which the
  ledger detail shows), the reason cannot tell them apart and needs not.
* `unreadable`: truncated-half, header-only, objstm-xref-garbage, deep-page-tree. A
  header, but neither library recovers a catalog, or walks the page tree (pdfium stops at
  its depth limit, pypdf at its own); a random truncation or trailer flip that destroys
  as much lands here too.
* `encrypted`: user-password, certificate. Both need a key the run does not have.
* a document whose page falls back: content-bomb (the worker hits its memory limit).
* documents pypdf refuses but pdfium renders: cyclic-page-tree, encrypted-attachment-only
  (the /EFF crypt filter: pypdf wants the password, pdfium needs none to show pages),
  no-header, junk-before-header, most xref and trailer damage.
"""

from __future__ import annotations

import gzip
import io
import random
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from PIL import Image
from pypdf import PdfReader, PdfWriter

from pagegate.samples.broken import (
    broken_xref_pdf,
    empty_file,
    html_as_pdf,
    random_bytes,
    truncated_pdf,
    zero_page_pdf,
)
from pagegate.samples.good import encrypted_pdf, owner_locked_pdf, text_pdf
from pagegate.samples.raw import (
    FONT,
    RESOURCES,
    build_pdf,
    flate,
    one_page_pdf,
    stream,
    text_content,
)

BOMB_LIMIT_MB = 256
"""The render workers' memory limit the expectations assume (the content bomb's)."""


@dataclass(frozen=True)
class Expect:
    pages: int | None = None        # a document with this many pages
    fallback: bool = False          # ... whose pages all fall back to their text layer
    reason: str | None = None       # a ledger record with this reason
    oracle: bool = False            # random damage: a document exactly when pdfium opens it


def document(pages: int, *, fallback: bool = False) -> Expect:
    return Expect(pages=pages, fallback=fallback)


def ledger(reason: str) -> Expect:
    return Expect(reason=reason)


ORACLE = Expect(oracle=True)


def _flip(data: bytes, start: int, end: int, seed: int, flips: int = 6) -> bytes:
    rng = random.Random(seed)
    out = bytearray(data)
    for _ in range(flips):
        out[rng.randrange(start, end)] = rng.randrange(256)
    return bytes(out)


def truncated_at_random(seed: int = 0) -> bytes:
    """A four-page text PDF cut at a seeded offset, like a download that stopped."""
    whole = text_pdf(4, title="Cut", seed=seed)
    return whole[: random.Random(seed).randrange(16, len(whole) - 1)]


def xref_flipped(seed: int = 0) -> bytes:
    """Six bytes of the cross-reference table overwritten (pdfium rebuilds the table)."""
    whole = text_pdf(3, title="Xref", seed=seed)
    return _flip(whole, whole.rindex(b"\nxref"), whole.rindex(b"trailer"), seed)


def trailer_flipped(seed: int = 0) -> bytes:
    """Six bytes of the trailer (and startxref) overwritten."""
    whole = text_pdf(3, title="Trailer", seed=seed)
    return _flip(whole, whole.rindex(b"trailer"), len(whole), seed)


def without_header() -> bytes:
    whole = text_pdf(2, title="Headless")
    return whole[whole.index(b"\n") + 1 :]


def junk_before_header() -> bytes:
    """A proxy's response headers and padding saved in front: the header is past 1,024."""
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/pdf\r\n\r\n" + b"x" * 2000 + text_pdf(1)


def cyclic_page_tree() -> bytes:
    """A /Pages node whose kid is its own parent (pypdf: "Detected cyclic page references")."""
    return build_pdf({
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [3 0 R 6 0 R] /Count 1 >>",
        3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
           b"/Resources " + RESOURCES % 5 + b" >>",
        4: stream(b"", text_content("Cyclic page tree")),
        5: FONT,
        6: b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R] /Count 0 >>",
    })


def wrong_length() -> bytes:
    """A content stream whose /Length says 5 bytes (pdfium finds `endstream` itself)."""
    return one_page_pdf("", content=stream(b"", text_content("Wrong length"), length=5))


def unknown_filter() -> bytes:
    """A content stream under /BrotliDecode, a filter no PDF library has: a blank page."""
    return one_page_pdf("", content=stream(b"/Filter /BrotliDecode", b"\x1b\x03\x00\xf8\xa5\x02"))


def media_box(box: bytes) -> Callable[[], bytes]:
    return lambda: one_page_pdf(f"MediaBox {box.decode()}", media_box=box)


def deep_page_tree(levels: int = 10_000) -> bytes:
    """One page under `levels` nested /Pages nodes."""
    objects = {1: b"<< /Type /Catalog /Pages 10 0 R >>",
               4: stream(b"", text_content("Deep page")), 5: FONT}
    for level in range(levels):
        number = 10 + level
        parent = b"/Parent %d 0 R " % (number - 1) if level else b""
        objects[number] = b"<< /Type /Pages %s/Kids [%d 0 R] /Count 1 >>" % (parent, number + 1)
    objects[10 + levels] = (b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] "
                            b"/Contents 4 0 R /Resources " % (9 + levels) + RESOURCES % 5 + b" >>")
    return build_pdf(objects)


def many_tiny_pages(pages: int = 10_000) -> bytes:
    """`pages` pages of 36 x 36 pt sharing one content stream."""
    kids = b" ".join(b"%d 0 R" % (10 + n) for n in range(pages))
    objects = {1: b"<< /Type /Catalog /Pages 2 0 R >>",
               2: b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
               4: stream(b"", b"BT /F1 8 Tf 4 16 Td (tiny) Tj ET"), 5: FONT}
    for n in range(pages):
        objects[10 + n] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 36 36] /Contents 4 0 R "
                           b"/Resources " + RESOURCES % 5 + b" >>")
    return build_pdf(objects)


def javascript_and_forms() -> bytes:
    """An OpenAction script and a filled text field (nothing runs: pdfium has no V8 here)."""
    return one_page_pdf(
        "Forms and JavaScript",
        catalog_extra=b"/OpenAction << /S /JavaScript /JS (app.alert\\('hello'\\);) >> "
                      b"/AcroForm << /Fields [6 0 R] /NeedAppearances true >> ",
        page_extra=b"/Annots [6 0 R] ",
        extra_objects={6: b"<< /Type /Annot /Subtype /Widget /FT /Tx /T (name) /V (filled in) "
                          b"/Rect [72 600 300 630] /P 3 0 R >>"},
    )


def _hex(value: bytes) -> bytes:
    return b"<" + value.hex().encode() + b">"


def encrypted_attachment_only(user_password: str = "secret") -> bytes:
    """A user password that guards only the embedded files: /StmF and /StrF are /Identity,
    /EFF names the crypt filter (PDF 1.7 section 7.6.5). Pages need no password."""
    writer = PdfWriter()
    writer.add_blank_page(612, 792)
    writer.encrypt(user_password, "owner", algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    trailer = PdfReader(io.BytesIO(out.getvalue())).trailer
    crypt: Any = trailer["/Encrypt"].get_object()
    ids: Any = trailer["/ID"]
    o_value: bytes = crypt["/O"].original_bytes
    u_value: bytes = crypt["/U"].original_bytes
    encrypt = (b"<< /Filter /Standard /V 4 /R 4 /Length 128 /P %d /O %s /U %s /CF << /StdCF "
               b"<< /CFM /AESV2 /AuthEvent /EFOpen /Length 16 >> >> /StmF /Identity "
               b"/StrF /Identity /EFF /StdCF >>"
               % (int(crypt["/P"]), _hex(o_value), _hex(u_value)))
    file_id = b"[%s %s]" % (_hex(ids[0].original_bytes), _hex(ids[1].original_bytes))
    return build_pdf({
        1: b"<< /Type /Catalog /Pages 2 0 R /Names << /EmbeddedFiles "
           b"<< /Names [(notes.txt) 7 0 R] >> >> >>",
        2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
           b"/Resources " + RESOURCES % 5 + b" >>",
        4: stream(b"", text_content("Only the attachment is encrypted")),
        5: FONT,
        6: encrypt,
        7: b"<< /Type /Filespec /F (notes.txt) /EF << /F 8 0 R >> >>",
        8: stream(b"/Type /EmbeddedFile", random.Random(3).randbytes(32)),
    }, trailer_extra=b"/Encrypt 6 0 R /ID " + file_id + b" ")


def certificate_encrypted() -> bytes:
    """Public-key (Adobe.PubSec) security handler: neither library has the key."""
    return encrypted_pdf().replace(b"/Filter /Standard", b"/Filter /Adobe.PubSec")


def image_file(kind: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), "navy").save(out, kind)
    return out.getvalue()


def zipped(compression: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=compression) as archive:
        archive.writestr("inner.pdf", text_pdf(1, title="Zipped"))
    return out.getvalue()


def header_only() -> bytes:
    return b"%PDF-1.7\n%%EOF\n"


def content_bomb(inflated_mb: int = 2 * BOMB_LIMIT_MB) -> bytes:
    """A page whose content stream inflates to `inflated_mb` MB of spaces."""
    body = b"BT /F1 24 Tf 72 700 Td (Bomb) Tj ET\n" + b" " * (inflated_mb * 2**20)
    return one_page_pdf("", content=flate(b"", body))


def image_bomb() -> bytes:
    """A 40,000 x 40,000 RGB image (4.8 GB decoded) from 64 KB of Flate data."""
    data = b"\0" * (64 * 2**20)
    image = flate(b"/Type /XObject /Subtype /Image /Width 40000 /Height 40000 "
                  b"/BitsPerComponent 8 /ColorSpace /DeviceRGB", data)
    page = one_page_pdf("", content=stream(b"", b"q 612 0 0 792 0 0 cm /Im1 Do Q"),
                        extra_objects={6: image})
    return page.replace(RESOURCES % 5, b"<< /Font << /F1 5 0 R >> /XObject << /Im1 6 0 R >> >>")


@dataclass(frozen=True)
class FuzzKind:
    make: Callable[[], bytes]
    expect: Expect


FUZZ_KINDS: Mapping[str, FuzzKind] = MappingProxyType({
    "truncated-half": FuzzKind(truncated_pdf, ledger("unreadable")),
    "header-only": FuzzKind(header_only, ledger("unreadable")),
    "objstm-xref-garbage": FuzzKind(broken_xref_pdf, ledger("unreadable")),
    "xref-flipped": FuzzKind(xref_flipped, document(3)),
    "no-header": FuzzKind(without_header, document(2)),
    "junk-before-header": FuzzKind(junk_before_header, document(1)),
    "cyclic-page-tree": FuzzKind(cyclic_page_tree, document(1)),
    "wrong-length": FuzzKind(wrong_length, document(1)),
    "unknown-filter": FuzzKind(unknown_filter, document(1)),
    "huge-mediabox": FuzzKind(media_box(b"[0 0 1000000 1000000]"), document(1)),
    "zero-mediabox": FuzzKind(media_box(b"[0 0 0 0]"), document(1)),
    "deep-page-tree": FuzzKind(deep_page_tree, ledger("unreadable")),
    "many-tiny-pages": FuzzKind(many_tiny_pages, document(10_000)),
    "javascript-and-forms": FuzzKind(javascript_and_forms, document(1)),
    "encrypted-attachment-only": FuzzKind(encrypted_attachment_only, document(1)),
    "owner-password-only": FuzzKind(owner_locked_pdf, document(2)),
    "user-password": FuzzKind(encrypted_pdf, ledger("encrypted")),
    "certificate": FuzzKind(certificate_encrypted, ledger("encrypted")),
    "zero-pages": FuzzKind(zero_page_pdf, ledger("zero_pages")),
    "png": FuzzKind(lambda: image_file("PNG"), ledger("not_a_pdf")),
    "jpeg": FuzzKind(lambda: image_file("JPEG"), ledger("not_a_pdf")),
    "zip-deflated": FuzzKind(lambda: zipped(zipfile.ZIP_DEFLATED), ledger("not_a_pdf")),
    "zip-stored": FuzzKind(lambda: zipped(zipfile.ZIP_STORED), document(1)),
    "gzip": FuzzKind(lambda: gzip.compress(text_pdf(1), mtime=0), ledger("not_a_pdf")),
    "empty": FuzzKind(empty_file, ledger("not_a_pdf")),
    "html": FuzzKind(html_as_pdf, ledger("not_a_pdf")),
    "random-bytes": FuzzKind(random_bytes, ledger("not_a_pdf")),
    "content-bomb": FuzzKind(content_bomb, document(1, fallback=True)),
    "image-bomb": FuzzKind(image_bomb, document(1)),
    **{f"truncated-random-{s}": FuzzKind(lambda s=s: truncated_at_random(s), ORACLE)  # type: ignore[misc]
       for s in range(3)},
    **{f"trailer-flipped-{s}": FuzzKind(lambda s=s: trailer_flipped(s), ORACLE)  # type: ignore[misc]
       for s in range(3)},
})
"""Every fuzz kind by name (the random ones in three seeded variants)."""

SLOW_KINDS = frozenset({"many-tiny-pages", "content-bomb", "image-bomb"})
"""Kinds that take seconds each (10,000 pages; inflating hundreds of MB)."""
