"""pagegate.pdf.reader and .document: validation and page counts with both libraries,
rendering size and rotation, fallback text."""

from __future__ import annotations

import io
import math

import pypdfium2 as pdfium
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image, ImageChops, ImageStat
from pypdf import PdfReader, PdfWriter
from reportlab.lib.pagesizes import letter
from reportlab.pdfgen.canvas import Canvas

from pagegate import samples
from pagegate.errors import (
    CorruptPdfError,
    EmptyPdfError,
    EncryptedPdfError,
    InputError,
    NotAPdfError,
    TooManyPagesError,
)
from pagegate.pdf.reader import (
    PdfInfo,
    extract_page_text,
    inspect_pdf,
    plan_render,
    render_page_png,
)

# --- helpers -------------------------------------------------------------------------------


def _one_page(pagesize: tuple[float, float], *, marker: bool = True) -> bytes:
    """A page with a solid red square in its top-left corner, to see where "up" went."""
    out = io.BytesIO()
    canvas = Canvas(out, pagesize=pagesize, invariant=1)
    if marker:
        side = min(pagesize) / 5
        canvas.setFillColorRGB(1, 0, 0)
        canvas.rect(0, pagesize[1] - side, side, side, fill=1, stroke=0)
    canvas.showPage()
    canvas.save()
    return out.getvalue()


def _with_rotate(data: bytes, degrees: int) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    for page in writer.pages:
        page.rotate(degrees)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _image(png: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(png))
    image.load()
    return image


def _red_corner(image: Image.Image) -> str:
    """Which corner of the image holds the red marker: 'tl', 'tr', 'bl' or 'br'."""
    rgb = image.convert("RGB")
    width, height = rgb.size
    corners = {
        "tl": (2, 2),
        "tr": (width - 3, 2),
        "bl": (2, height - 3),
        "br": (width - 3, height - 3),
    }
    red = [name for name, xy in corners.items() if rgb.getpixel(xy) == (255, 0, 0)]
    assert len(red) == 1, f"expected one red corner, found {red}"
    return red[0]


def _mean_difference(a: Image.Image, b: Image.Image) -> float:
    """Mean grey-level difference at quarter size, blind to the one-pixel shift that rounding
    the page size up to whole pixels puts on different edges in different orientations."""
    assert a.size == b.size
    diff = ImageChops.difference(a.convert("L").reduce(4), b.convert("L").reduce(4))
    return float(ImageStat.Stat(diff).mean[0])


# --- inspect_pdf ---------------------------------------------------------------------------


@pytest.mark.parametrize("pages", [1, 3, 7])
def test_inspect_counts_pages(pages: int) -> None:
    assert inspect_pdf(samples.text_pdf(pages)) == PdfInfo(page_count=pages)


@pytest.mark.parametrize(
    ("name", "expected_pages"),
    [
        ("text", 3),
        ("image", 1),
        ("scanned", 1),
        ("rotated", 2),
        ("owner-locked", 2),
        ("huge-page", 1),
    ],
)
def test_every_good_sample_is_readable(name: str, expected_pages: int) -> None:
    assert inspect_pdf(samples.GOOD_SAMPLES[name]()).page_count == expected_pages


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (samples.encrypted_pdf(), EncryptedPdfError),
        (samples.truncated_pdf(), CorruptPdfError),
        (samples.broken_xref_pdf(), CorruptPdfError),
        (samples.zero_page_pdf(), EmptyPdfError),
        (samples.html_as_pdf(), NotAPdfError),
        (samples.random_bytes(), NotAPdfError),
        (samples.empty_file(), NotAPdfError),
    ],
    ids=["encrypted", "truncated", "broken-xref", "zero-pages", "html", "random", "empty"],
)
def test_each_bad_input_gets_its_error_and_source(data: bytes, error: type[InputError]) -> None:
    with pytest.raises(error) as caught:
        inspect_pdf(data, source="s3://drop/file.pdf")
    assert type(caught.value) is error
    assert caught.value.source == "s3://drop/file.pdf"


def test_ledger_reasons_of_the_bad_classes() -> None:
    """The ledger stores these strings; they are part of pagegate's output format."""
    reasons = {
        cls: cls.reason for cls in (NotAPdfError, CorruptPdfError, EncryptedPdfError, EmptyPdfError)
    }
    assert reasons == {
        NotAPdfError: "not_a_pdf",
        CorruptPdfError: "unreadable",
        EncryptedPdfError: "encrypted",
        EmptyPdfError: "zero_pages",
    }


def test_header_is_found_after_leading_junk_within_1024_bytes() -> None:
    junk = b"HTTP/1.1 200 OK\r\nContent-Type: application/pdf\r\n\r\n" + b"\0" * 900
    assert inspect_pdf(junk + samples.text_pdf(2)).page_count == 2


def test_a_body_whose_header_is_missing_or_past_1024_bytes_opens_with_one_added() -> None:
    """pdfium opens it once a header line is put in front (it rebuilds the offsets)."""
    whole = samples.text_pdf(2)
    for data in (b"\0" * 1024 + whole, b"x" * 5000 + whole, whole[whole.index(b"\n") + 1 :]):
        info = inspect_pdf(data)
        assert (info.page_count, info.header_added, info.engine) == (2, True, "pdfium")
        assert "Sample page 2" in extract_page_text(data, 1)


def test_without_a_header_and_without_a_body_it_is_not_a_pdf_and_both_libraries_say_why() -> None:
    with pytest.raises(NotAPdfError) as caught:
        inspect_pdf(samples.html_as_pdf())
    assert "pdfium: Data format error" in str(caught.value)
    assert "pypdf: PdfStreamError" in str(caught.value)


def test_too_many_pages() -> None:
    data = samples.text_pdf(5)
    assert inspect_pdf(data, max_pages=5).page_count == 5
    with pytest.raises(TooManyPagesError, match="5 pages") as caught:
        inspect_pdf(data, max_pages=4, source="a.pdf")
    assert caught.value.source == "a.pdf"


def test_password_opens_an_encrypted_pdf() -> None:
    data = samples.encrypted_pdf("hunter2")
    assert inspect_pdf(data, password="hunter2").page_count == 2
    with pytest.raises(EncryptedPdfError, match="wrong"):
        inspect_pdf(data, password="nope")
    with pytest.raises(EncryptedPdfError, match="no password"):
        inspect_pdf(data)


def test_aes256_encrypted_pdf_from_pypdf() -> None:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(samples.text_pdf(3))))
    writer.encrypt("k3y", "owner", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    data = out.getvalue()
    with pytest.raises(EncryptedPdfError):
        inspect_pdf(data)
    assert inspect_pdf(data, password="k3y").page_count == 3
    assert "Sample page 2" in extract_page_text(data, 1, password="k3y")


def test_owner_password_only_counts_as_readable() -> None:
    data = samples.owner_locked_pdf(3)
    assert PdfReader(io.BytesIO(data)).is_encrypted
    assert inspect_pdf(data).page_count == 3
    assert render_page_png(data, 2).height == 1288
    assert "Owner locked page 3" in extract_page_text(data, 2)


def test_unsupported_security_handler_is_encrypted_not_corrupt() -> None:
    """Certificate (PubSec) encryption: pypdf raises NotImplementedError, pdfium error 5."""
    data = samples.encrypted_pdf().replace(b"/Filter /Standard", b"/Filter /Adobe.PubSec")
    assert data != samples.encrypted_pdf()
    with pytest.raises(EncryptedPdfError):
        inspect_pdf(data)
    with pytest.raises(EncryptedPdfError):
        render_page_png(data, 0)


# --- plan_render (pure) ----------------------------------------------------------------------


def test_plan_for_a_letter_page() -> None:
    plan = plan_render(612, 792, target_longest_dim=1288, max_pixels=1288 * 1288 * 2)
    assert (plan.width, plan.height) == (996, 1288)  # 612 * 1288 / 792 = 995.3, rounded up


def test_float_noise_does_not_cost_a_pixel() -> None:
    """551 * (1288 / 551) is a hair above 1288 in floating point; the plan must still give 1288."""
    assert math.ceil(551 * (1288 / 551)) == 1289
    plan = plan_render(400, 551, target_longest_dim=1288, max_pixels=1288 * 1288 * 2)
    assert plan.height == 1288


def test_plan_caps_pixels_on_a_huge_page() -> None:
    plan = plan_render(14400, 14400, target_longest_dim=4000, max_pixels=1_000_000)
    assert plan.width == plan.height
    assert 990_000 <= plan.width * plan.height <= 1_000_000


def test_plan_for_a_long_thin_strip() -> None:
    plan = plan_render(72, 72000, target_longest_dim=100_000, max_pixels=1_000_000)
    assert plan.width * plan.height <= 1_000_000
    assert plan.width >= 1


@pytest.mark.parametrize(
    ("width", "height", "target", "max_pixels"),
    [(0, 792, 1288, 10), (612, -1, 1288, 10), (612, 792, 0, 10), (612, 792, 1288, 0)],
)
def test_plan_rejects_impossible_requests(
    width: float, height: float, target: int, max_pixels: int
) -> None:
    with pytest.raises(ValueError):
        plan_render(width, height, target_longest_dim=target, max_pixels=max_pixels)


_sides = st.floats(min_value=0.01, max_value=200_000, allow_nan=False, allow_infinity=False)


@given(
    width=_sides,
    height=_sides,
    target=st.integers(min_value=1, max_value=20_000),
    max_pixels=st.integers(min_value=1, max_value=50_000_000),
)
def test_plan_never_exceeds_either_limit(
    width: float, height: float, target: int, max_pixels: int
) -> None:
    plan = plan_render(width, height, target_longest_dim=target, max_pixels=max_pixels)
    # The bitmap pypdfium2 will allocate for this scale.
    assert (plan.width, plan.height) == (
        math.ceil(width * plan.scale),
        math.ceil(height * plan.scale),
    )
    assert plan.width >= 1 and plan.height >= 1
    assert max(plan.width, plan.height) <= target
    assert plan.width * plan.height <= max_pixels
    uncapped = plan_render(width, height, target_longest_dim=target, max_pixels=target * target)
    if uncapped.width * uncapped.height <= max_pixels:
        # The pixel cap does not bind: the longest side hits the target exactly.
        assert (plan.width, plan.height) == (uncapped.width, uncapped.height)
        assert max(plan.width, plan.height) == target
    elif max_pixels >= 16:
        # When the cap binds, it is used well, not just respected.
        assert plan.width * plan.height > max_pixels / 4


# --- render_page_png -----------------------------------------------------------------------


def test_render_is_a_png_whose_longest_side_is_the_target() -> None:
    rendered = render_page_png(samples.text_pdf(2), 1)
    image = _image(rendered.png)
    assert image.format == "PNG"
    assert image.mode == "RGB"
    assert image.size == (rendered.width, rendered.height)
    assert rendered.height == 1288
    assert abs(rendered.width - 612 * 1288 / 792) <= 1


def test_the_png_holds_exactly_the_pixels_pdfium_rendered() -> None:
    """The encoder (libpng, fixed filter) is lossless and keeps pdfium's colours in RGB
    order: a scanned page and a page with a red marker, decoded back, equal pdfium's own
    bitmaps of them."""
    for data in (samples.scanned_pdf(1), _one_page(letter)):
        rendered = render_page_png(data, 0)
        page = pdfium.PdfDocument(data)[0]
        reference = page.render(scale=1288 / max(page.get_size())).to_pil().convert("RGB")
        decoded = _image(rendered.png)
        assert decoded.size == reference.size
        assert ImageChops.difference(decoded, reference).getbbox() is None


def test_render_target_is_configurable() -> None:
    rendered = render_page_png(samples.text_pdf(1), 0, target_longest_dim=500)
    assert (rendered.width, rendered.height) == (387, 500)


def test_page_rotate_is_honoured() -> None:
    data = samples.rotated_pdf()
    upright, turned = render_page_png(data, 0), render_page_png(data, 1)
    assert upright.width < upright.height  # portrait
    assert turned.width > turned.height  # /Rotate 90: landscape
    assert turned.width == 1288


@pytest.mark.parametrize(
    ("rotation", "corner"),
    [(0, "tl"), (90, "bl"), (180, "br"), (270, "tr")],
)
def test_extra_rotation_turns_counter_clockwise(rotation: int, corner: str) -> None:
    rendered = render_page_png(_one_page(letter), 0, rotation=rotation)
    assert _red_corner(_image(rendered.png)) == corner
    if rotation in (90, 270):
        assert (rendered.width, rendered.height) == (1288, 996)


@pytest.mark.parametrize(
    ("rotation", "transpose"),
    [
        (90, Image.Transpose.ROTATE_90),
        (180, Image.Transpose.ROTATE_180),
        (270, Image.Transpose.ROTATE_270),
    ],
)
def test_extra_rotation_matches_olmocr_transpose(rotation: int, transpose: Image.Transpose) -> None:
    """olmOCR applies rotation_correction r as Image.transpose(ROTATE_r) on the render."""
    data = samples.text_pdf(1)
    reference = _image(render_page_png(data, 0).png).transpose(transpose)
    rotated = _image(render_page_png(data, 0, rotation=rotation).png)
    assert _mean_difference(rotated, reference) < 2.0
    # The opposite turn differs clearly (about 17 here), so the comparison above can fail.
    opposite = _image(render_page_png(data, 0, rotation=(360 - rotation) % 360).png)
    if rotation != 180:
        assert _mean_difference(opposite, reference) > 10.0


def test_extra_rotation_composes_with_page_rotate() -> None:
    """A page shown turned clockwise by /Rotate 90 comes back upright with rotation=90."""
    data = _with_rotate(_one_page(letter), 90)
    shown = _image(render_page_png(data, 0).png)
    assert shown.width > shown.height
    assert _red_corner(shown) == "tr"
    fixed = _image(render_page_png(data, 0, rotation=90).png)
    assert fixed.width < fixed.height
    assert _red_corner(fixed) == "tl"


def test_invalid_rotation_is_rejected() -> None:
    with pytest.raises(ValueError, match="rotation"):
        render_page_png(samples.text_pdf(1), 0, rotation=45)


def test_huge_page_is_capped_by_target_and_by_max_pixels() -> None:
    data = samples.huge_page_pdf()
    default = render_page_png(data, 0)
    assert (default.width, default.height) == (1288, 1288)
    capped = render_page_png(data, 0, target_longest_dim=20_000, max_pixels=400_000)
    assert capped.width * capped.height <= 400_000
    assert capped.width == capped.height >= 600
    assert _image(capped.png).size == (capped.width, capped.height)


def test_long_thin_strip_is_capped_by_max_pixels() -> None:
    data = _one_page((72, 72_000), marker=False)  # 1 x 1000 inches
    default = render_page_png(data, 0)
    assert default.height == 1288 and default.width >= 1
    capped = render_page_png(data, 0, target_longest_dim=1_000_000, max_pixels=300_000)
    assert capped.width * capped.height <= 300_000
    assert capped.height > 100 * capped.width
    assert _image(capped.png).size == (capped.width, capped.height)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (samples.encrypted_pdf(), EncryptedPdfError),
        (samples.truncated_pdf(), CorruptPdfError),
        (samples.broken_xref_pdf(), CorruptPdfError),
        (samples.html_as_pdf(), NotAPdfError),
        (samples.empty_file(), NotAPdfError),
    ],
    ids=["encrypted", "truncated", "broken-xref", "html", "empty"],
)
def test_render_and_extract_errors(data: bytes, error: type[InputError]) -> None:
    with pytest.raises(error):
        render_page_png(data, 0)
    with pytest.raises(error):
        extract_page_text(data, 0)


def test_render_with_password() -> None:
    data = samples.encrypted_pdf("pw")
    assert render_page_png(data, 1, password="pw").height == 1288
    with pytest.raises(EncryptedPdfError):
        render_page_png(data, 1, password="wrong")


def test_page_beyond_the_document_is_corrupt_not_a_crash() -> None:
    data = samples.text_pdf(2)
    with pytest.raises(CorruptPdfError, match="has 2 pages"):
        render_page_png(data, 2)
    with pytest.raises(CorruptPdfError):
        extract_page_text(data, 5)
    with pytest.raises(ValueError):
        render_page_png(data, -1)


# --- extract_page_text ---------------------------------------------------------------------


def test_fallback_text_is_the_page_own_text() -> None:
    data = samples.text_pdf(3, title="Report")
    texts = [extract_page_text(data, index) for index in range(3)]
    for index, text in enumerate(texts):
        assert text.startswith(f"Report page {index + 1}\n")
        assert "\r" not in text
        assert len(text.split()) > 30
    assert len(set(texts)) == 3


def test_fallback_text_of_a_figure_is_its_caption() -> None:
    assert extract_page_text(samples.image_pdf(), 0) == (
        "Figure 1: shapes over a gradient, sample 0"
    )


def test_page_without_a_text_layer_gives_empty_text() -> None:
    data = samples.scanned_pdf(2)
    assert extract_page_text(data, 0) == ""
    assert extract_page_text(data, 1) == ""
    assert extract_page_text(_one_page(letter, marker=False), 0) == ""


def test_a_run_password_does_not_break_plain_or_owner_locked_pdfs() -> None:
    """One password is configured for a whole run; it must only be used where it is needed."""
    from pagegate.pdf.reader import inspect_pdf as inspect
    from pagegate.samples import encrypted_pdf, owner_locked_pdf, text_pdf

    assert inspect(text_pdf(2), password="secret").page_count == 2
    assert inspect(owner_locked_pdf(2), password="secret").page_count == 2
    assert inspect(encrypted_pdf("secret"), password="secret").page_count >= 1
    with pytest.raises(EncryptedPdfError, match="wrong"):
        inspect(encrypted_pdf("secret"), password="nope")
