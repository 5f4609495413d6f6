"""Layout blocks: what a model says is where on the page, in one frame for every model.

Parsers return boxes as fractions of the image the model saw (x0, y0, x1, y1 from its
top-left corner), whatever grid the model writes them on; the page path, which knows the
page's size, turns them into PDF points (`block_in_points`). Points are measured from the
top-left corner of the page as displayed (after its /Rotate), x to the right and y down:
the frame a reader draws in, and the one pdfplumber and pdfium's text boxes use once y
is flipped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pagegate.errors import ReplyParseError


@dataclass(frozen=True)
class LayoutBlock:
    """One block of a page: its category as the model names it, its box, its text."""

    category: str
    box: tuple[float, float, float, float]
    """x0, y0, x1, y1 as fractions of the image's width and height (0..1)."""
    text: str


def box_fractions(coords: Any, width: float, height: float) -> tuple[float, float, float, float]:
    """A model's [x0, y0, x1, y1] on a `width` x `height` grid, as image fractions.

    The corners are sorted and clamped to the image, as docling-core does with slightly
    inverted boxes; anything that is not four finite numbers is a parse error.
    """
    if not isinstance(coords, Sequence) or isinstance(coords, str) or len(coords) != 4:
        raise ReplyParseError(f"a box must be four numbers, got {str(coords)[:40]!r}")
    values: list[float] = []
    for c in coords:
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c):
            raise ReplyParseError(f"a box must be four numbers, got {str(coords)[:40]!r}")
        values.append(float(c))
    x0, x1 = sorted((values[0], values[2]))
    y0, y1 = sorted((values[1], values[3]))

    def clamp(v: float, size: float) -> float:
        return min(1.0, max(0.0, v / size))

    return clamp(x0, width), clamp(y0, height), clamp(x1, width), clamp(y1, height)


def block_in_points(block: LayoutBlock, width_pt: float, height_pt: float) -> dict[str, Any]:
    """The sidecar's record of one block: category, bbox in PDF points (rounded to 0.01), text."""
    x0, y0, x1, y1 = block.box
    bbox = [round(x0 * width_pt, 2), round(y0 * height_pt, 2),
            round(x1 * width_pt, 2), round(y1 * height_pt, 2)]
    return {"category": block.category, "bbox": bbox, "text": block.text}


def smart_resize(height: int, width: int, *, factor: int = 28, min_pixels: int = 3136,
                 max_pixels: int = 11_289_600) -> tuple[int, int]:
    """The (height, width) a Qwen2-VL-style processor resizes an image to.

    Both sides become multiples of `factor` nearest the original, then the whole image
    is scaled into [min_pixels, max_pixels] keeping its aspect ratio. dots.mocr's boxes
    are pixels of this resized image (rednote-hilab/dots.ocr dots_ocr/utils/image_utils.py
    smart_resize and consts.py; the same rule as Qwen2-VL's image processor).
    """
    if height < 1 or width < 1:
        raise ValueError("image sides must be positive")
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w
