"""--layout: a parsed box lands on the page, in PDF points, and the sidecar holds it.

A generated PDF puts text at a known place. The page is rendered by a profile's image
rule, the text's ink is found in the image and written into a reply the way the model
writes boxes (Chandra's 0-1000 grid, dots.mocr's resized pixels); the parsed block, in
points, must cover the text where pdfium says its characters are.
"""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import datetime
from pathlib import Path

import httpx
import imagecodecs
import numpy as np
import pypdfium2 as pdfium
import pytest

from pagegate.admission.base import FixedLimit
from pagegate.clock import MonotonicClock
from pagegate.config import RunConfig
from pagegate.ocr.client import PageClient
from pagegate.ocr.page import PageOcr, PdfDocument
from pagegate.ocr.run import pool_settings
from pagegate.ocr.stats import RunStats
from pagegate.output.documents import PageLayout, PageResult, build_dolma_document, layout_lines
from pagegate.output.workspace import Workspace, layout_key
from pagegate.pdf.pool import RenderPool
from pagegate.pdf.reader import render_page_png
from pagegate.pdf.wire import PdfSource
from pagegate.samples.raw import one_page_pdf, stream
from pagegate.vlm.chat import parse_chat_response
from pagegate.vlm.layout import block_in_points, smart_resize
from pagegate.vlm.profiles import get_profile

# "Layout" in Helvetica 36 with its baseline at (150, 400) points on a letter page, and a
# black box from (300, 100) to (500, 180) points (PDF coordinates: origin bottom-left).
CONTENT = b"BT /F1 36 Tf 150 400 Td (Layout) Tj ET 0 0 0 rg 300 100 200 80 re f"
PAGE_W, PAGE_H = 612.0, 792.0


def pdf() -> bytes:
    return one_page_pdf("", content=stream(b"", CONTENT))


def text_box_points() -> tuple[float, float, float, float]:
    """Where pdfium says the characters are: x0, top, x1, bottom from the top-left corner."""
    doc = pdfium.PdfDocument(pdf())
    try:
        text = doc[0].get_textpage()
        boxes = [text.get_charbox(i) for i in range(text.count_chars())]
    finally:
        doc.close()
    left = min(b[0] for b in boxes)
    right = max(b[2] for b in boxes)
    bottom = min(b[1] for b in boxes)
    top = max(b[3] for b in boxes)
    return left, PAGE_H - top, right, PAGE_H - bottom


def ink_box(png: bytes, region: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """The dark pixels' box (x0, y0, x1, y1, exclusive ends) within `region` of the image."""
    pixels = imagecodecs.png_decode(png)
    x0, y0, x1, y1 = region
    dark = pixels[y0:y1, x0:x1].min(axis=2) < 128
    ys, xs = np.nonzero(dark)
    return x0 + int(xs.min()), y0 + int(ys.min()), x0 + int(xs.max()) + 1, y0 + int(ys.max()) + 1


def reply_body(content: str) -> dict[str, object]:
    return {"choices": [{"finish_reason": "stop", "message": {"content": content}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1}}


def chandra_reply(page_png: bytes, width: int, height: int) -> str:
    """The page's two blocks as Chandra writes them: boxes on its 0-1000 grid."""
    blocks = []
    split = height * 2 // 3  # between the text (ends near half-way) and the box (from 77 %)
    for label, region in (("Text", (0, 0, width, split)), ("Figure", (0, split, width, height))):
        x0, y0, x1, y1 = ink_box(page_png, region)
        grid = [round(x0 * 1000 / width), round(y0 * 1000 / height),
                round(x1 * 1000 / width), round(y1 * 1000 / height)]
        blocks.append(f'<div data-bbox="{grid}" data-label="{label}"><p>{label}</p></div>')
    return "".join(blocks)


def test_a_chandra_box_lands_on_the_text_in_pdf_points() -> None:
    rule = get_profile("chandra-2").image
    page = render_page_png(pdf(), 0, target_longest_dim=rule.max_side, max_pixels=rule.max_pixels,
                           dpi=rule.dpi)
    assert (page.width, page.height, page.width_pt, page.height_pt) == (1632, 2112, PAGE_W, PAGE_H)
    reply, _ = parse_chat_response(get_profile("chandra-2"),
                                   reply_body(chandra_reply(page.png, page.width, page.height)),
                                   (page.width, page.height))
    text, figure = (block_in_points(b, page.width_pt, page.height_pt) for b in reply.blocks)
    # a 0-1000 grid step is 0.6 pt across and 0.8 pt down a letter page
    assert text["bbox"] == pytest.approx(text_box_points(), abs=1.5)
    assert figure["bbox"] == pytest.approx([300, PAGE_H - 180, 500, PAGE_H - 100], abs=1.0)


def test_a_dots_box_in_resized_pixels_lands_on_the_figure() -> None:
    rule = get_profile("dots-mocr").image
    page = render_page_png(pdf(), 0, target_longest_dim=rule.max_side, max_pixels=rule.max_pixels,
                           dpi=rule.dpi)
    height, width = smart_resize(page.height, page.width)
    x0, y0, x1, y1 = ink_box(page.png, (0, page.height * 2 // 3, page.width, page.height))
    sx, sy = width / page.width, height / page.height  # the model sees the resized image
    cell = {"bbox": [round(x0 * sx), round(y0 * sy), round(x1 * sx), round(y1 * sy)],
            "category": "Picture"}
    reply, _ = parse_chat_response(get_profile("dots-mocr"), reply_body(json.dumps([cell])),
                                   (page.width, page.height))
    figure = block_in_points(reply.blocks[0], page.width_pt, page.height_pt)
    assert figure["bbox"] == pytest.approx([300, PAGE_H - 180, 500, PAGE_H - 100], abs=1.0)


def test_the_sidecar_has_one_line_per_page_beside_the_result(tmp_path: Path) -> None:
    blocks = ({"category": "Text", "bbox": [150.0, 366.0, 260.0, 400.0], "text": "Layout"},)
    read = parse_chat_response(get_profile("qwen3-vl"), reply_body("Layout"))[0]
    pages = [
        PageResult(2, "fallback text", None, True, 0, 0, 8, error="x"),
        PageResult(1, "Layout", read, False, 1, 1, 1, layout=PageLayout(PAGE_W, PAGE_H, blocks)),
    ]
    uri = "s3://b/doc.pdf"
    doc = build_dolma_document(source_uri=uri, pages=pages, model="m",
                               profile=get_profile("chandra-2"), now=datetime(2026, 1, 1),
                               pagegate_version="t")
    assert doc["metadata"]["profile"] == "chandra-2"
    assert "bbox" not in doc["text"]  # the Dolma text stays markdown
    workspace = Workspace.open(str(tmp_path))
    workspace.commit_document(uri, doc, markdown=False, layout=layout_lines(doc, pages))
    lines = [json.loads(line) for line in
             (tmp_path / layout_key(uri)).read_text().splitlines()]
    assert lines == [
        {"id": doc["id"], "page": 1, "width_pt": PAGE_W, "height_pt": PAGE_H,
         "blocks": [dict(blocks[0], bbox=list(blocks[0]["bbox"]))]},
        {"id": doc["id"], "page": 2, "width_pt": None, "height_pt": None, "blocks": []},
    ]
    assert workspace.is_committed(uri)


def test_the_page_path_renders_by_the_profile_and_lays_boxes_on_the_page() -> None:
    """A page's whole way: the render pool renders it by Chandra's rule (192 dpi), the
    server (a MockTransport playing Chandra) answers with the ink's boxes on its 0-1000
    grid, and the PageResult carries them in PDF points."""
    profile = get_profile("chandra-2")
    seen: list[tuple[int, int]] = []

    def chandra(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        url = next(p["image_url"]["url"] for p in body["messages"][-1]["content"]
                   if p["type"] == "image_url")
        png = base64.b64decode(url.split(",", 1)[1])
        height, width = imagecodecs.png_decode(png).shape[:2]
        seen.append((width, height))
        return httpx.Response(200, json=reply_body(chandra_reply(png, width, height)))

    async def one_page() -> PageResult:
        settings = pool_settings(RunConfig(sources=("x",), workspace="w", profile=profile.name,
                                           render_workers=1))
        async with httpx.AsyncClient(transport=httpx.MockTransport(chandra)) as http, \
                RenderPool(settings) as renderer:
            pages = PageOcr(client=PageClient(http, "http://chandra.invalid/v1"),
                            admission=FixedLimit(1), renderer=renderer, profile=profile,
                            model="chandra", clock=MonotonicClock(), stats=RunStats(started_at=0.0),
                            max_attempts=2, unavailable_after_seconds=60)
            doc = PdfDocument("mem://layout.pdf", PdfSource("mem://layout.pdf", data=pdf()), 1)
            return await pages.run(doc, 0, "g")

    result = asyncio.run(one_page())
    assert seen == [(1632, 2112)]
    assert not result.is_fallback and result.text == "Text\n\nFigure"
    assert result.layout is not None
    assert (result.layout.width_pt, result.layout.height_pt) == (PAGE_W, PAGE_H)
    text, figure = result.layout.blocks
    assert text["bbox"] == pytest.approx(text_box_points(), abs=1.5)
    assert figure["bbox"] == pytest.approx([300, PAGE_H - 180, 500, PAGE_H - 100], abs=1.0)
