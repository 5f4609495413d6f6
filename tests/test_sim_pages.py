"""The simulator finds the page a request's image shows, whatever size a profile renders
it at, and places each text line where the page displays it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pagegate import samples
from pagegate.pdf.reader import render_page_png
from pagegate.sim.pages import PageIndex, displayed_box, pdf_paths

W, H = 612.0, 792.0
# a rect near the top-left corner of the unrotated page: left 61.2, right 306, top 712.8
RECT = (61.2, 633.6, 306.0, 712.8)


@pytest.mark.parametrize(
    ("rotation", "expected"),
    [
        (0, (0.1, 0.1, 0.5, 0.2)),  # as drawn
        (90, (1 - 0.2, 0.1, 1 - 0.1, 0.5)),  # turned clockwise: the top edge is on the right
        (180, (0.5, 0.8, 0.9, 0.9)),  # upside down: near the bottom-right
        (270, (0.1, 0.5, 0.2, 0.9)),  # turned anticlockwise: the top edge is on the left
    ],
)
def test_a_line_is_placed_where_the_turned_page_displays_it(
    rotation: int, expected: tuple[float, ...]
) -> None:
    box = displayed_box(RECT, rotation, (0.0, 0.0), (W, H))
    assert box == pytest.approx(expected, abs=1e-9)


def test_the_crop_box_origin_is_taken_off() -> None:
    moved = (RECT[0] + 10, RECT[1] + 20, RECT[2] + 10, RECT[3] + 20)
    assert displayed_box(moved, 0, (10.0, 20.0), (W, H)) == pytest.approx((0.1, 0.1, 0.5, 0.2))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return samples.write_sample_corpus(tmp_path_factory.mktemp("pages"), good=8,
                                       include_bad=False)


RULES: dict[str, dict[str, Any]] = {  # the image rules of the profiles (pagegate.vlm.profiles), as render arguments
    "olmocr-2": {"target_longest_dim": 1288},
    "chandra-2": {"dpi": 192, "target_longest_dim": 3072, "max_pixels": 6_291_456},
    "docling 144 dpi": {"dpi": 144, "target_longest_dim": 10_000, "max_pixels": 11_289_600},
    "nanonets-ocr2": {"target_shortest_dim": 1280, "target_longest_dim": 10_000,
                      "max_pixels": 11_289_600},
    "a small render": {"target_longest_dim": 400},
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_every_page_is_found_from_any_profiles_render(corpus: list[Path], rule: str) -> None:
    index = PageIndex.from_paths([str(corpus[0].parent)])
    assert {Path(p.source) for p in index.pages} == set(corpus)
    for page in index.pages:
        image = render_page_png(Path(page.source), page.index, **RULES[rule])
        found = index.find(image.png)
        assert found is not None and (found.source, found.index) == (page.source, page.index)


def test_a_page_outside_the_corpus_or_no_image_is_not_found(corpus: list[Path]) -> None:
    index = PageIndex.from_paths([str(p) for p in corpus if "text" not in p.name])
    outside = next(p for p in corpus if "text" in p.name)
    for n in range(2):
        assert index.find(render_page_png(outside, n).png) is None
    assert index.find(b"not a png") is None
    assert PageIndex([]).find(render_page_png(outside, 0).png) is None


def test_the_text_lines_are_the_pages_own(corpus: list[Path]) -> None:
    text_pdf = next(p for p in corpus if "text" in p.name)
    page = PageIndex.from_paths([str(text_pdf)]).pages[0]
    assert page.lines[0].text == "Document 0 page 1"
    assert all(0 <= v <= 1 for line in page.lines for v in line.box)
    tops = [line.box[1] for line in page.lines]
    assert tops == sorted(tops)


def test_a_path_that_is_not_there_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file or folder"):
        pdf_paths([str(tmp_path / "missing")])
