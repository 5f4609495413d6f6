"""Count a PDF's pages for planning.

Counting pages means reading each PDF once (pypdf needs the whole file); the planner runs
these reads on a bounded pool in listing order (pagegate.io.pool), so the groups come
out the same on every rerun.
The count uses pypdf alone: it is pure Python, so it is safe on the planner's threads and
a hostile file cannot crash the planner, where pdfium (not thread-safe, native) could.
A PDF pypdf cannot read (some that pdfium opens, as the run will) still gets a group,
weighted as one page; its group task inspects it with both libraries and does it or
records why.
`pagegate.plan.pending` uses these to plan only what is left to do.
"""

from __future__ import annotations

import logging
from typing import Any

from pagegate.errors import InputError
from pagegate.io.storage import read_uri
from pagegate.pdf.document import open_pdf
from pagegate.plan.groups import PlannedPdf

log = logging.getLogger("pagegate.plan")

def count_pages(uri: str, *, s3_client: Any, password: str | None) -> PlannedPdf:
    """Page count of one PDF, or None when it cannot be fetched or opened.

    The password is used only if the PDF needs it (see `pagegate.pdf.document.open_pdf`).
    """
    try:
        data = read_uri(uri, s3_client=s3_client)
        with open_pdf(data, password=password, use_pdfium=False, source=uri) as pdf:
            pages: int | None = pdf.page_count
    except InputError as exc:
        log.info("planning: %s cannot be counted (%s); its task will record why", uri, exc)
        pages = None
    return PlannedPdf(uri, pages)
