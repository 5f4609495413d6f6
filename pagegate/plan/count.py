"""Count a PDF's pages for planning.

Counting pages means reading each PDF once (pypdf needs the whole file); the planner runs
these reads on a bounded pool in listing order (pagegate.io.pool), so the groups come
out the same on every rerun.
A PDF that cannot be read or opened still gets a group: its group task records why.
`pagegate.plan.pending` uses these to plan only what is left to do.
"""

from __future__ import annotations

import logging
from typing import Any

from pagegate.errors import InputError
from pagegate.io.storage import read_uri
from pagegate.pdf.reader import inspect_pdf
from pagegate.plan.groups import PlannedPdf

log = logging.getLogger("pagegate.plan")

def count_pages(uri: str, *, s3_client: Any, password: str | None) -> PlannedPdf:
    """Page count of one PDF, or None when it cannot be fetched or opened.

    The password is used only if the PDF needs it (see `pagegate.pdf.reader.inspect_pdf`).
    """
    try:
        data = read_uri(uri, s3_client=s3_client)
        pages: int | None = inspect_pdf(data, password=password, source=uri).page_count
    except InputError as exc:
        log.info("planning: %s cannot be counted (%s); its task will record why", uri, exc)
        pages = None
    return PlannedPdf(uri, pages)
