"""Count a PDF's pages for planning, never parsing it in the run's own process.

The planner's threads only fetch: a local file is named by its path, an S3 object is
streamed to a temporary file; the count itself runs in a counting process
(pagegate.pdf.counter), with a per-file timeout and an address-space limit. So no PDF's
bytes or object tree stay in the run's heap, and a file that hangs or blows up the
parser costs its own count. A PDF that cannot be counted (unreadable, hung, out of
memory) still gets a group, weighted as one page; its group task inspects it under the
render pool's limits and does it or records why.
`pagegate.plan.pending` uses these to plan only what is left to do.
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any

from pagegate.errors import InputError
from pagegate.io.storage import s3_download
from pagegate.io.store import S3_SCHEME, split_s3_uri
from pagegate.pdf.counter import PageCounter
from pagegate.pdf.wire import PdfSource
from pagegate.plan.groups import PlannedPdf

log = logging.getLogger("pagegate.plan")


def count_pages(uri: str, *, counter: PageCounter, s3_client: Any,
                password: str | None) -> PlannedPdf:
    """Page count of one PDF, or None when it cannot be fetched or counted.

    The password is used only if the PDF needs it (see `pagegate.pdf.document.open_pdf`).
    """
    if not uri.startswith(S3_SCHEME):
        path = os.path.abspath(os.path.expanduser(uri))
        return PlannedPdf(uri, counter.count(PdfSource(uri, path=path), password=password))
    bucket, key = split_s3_uri(uri)
    with tempfile.NamedTemporaryFile(prefix="pagegate-count-", suffix=".pdf") as copy:
        try:
            s3_download(s3_client, bucket, key, copy)
        except InputError as exc:
            log.info("planning: %s cannot be counted (%s); its task will record why", uri, exc)
            return PlannedPdf(uri, None)
        copy.flush()
        return PlannedPdf(uri, counter.count(PdfSource(uri, path=copy.name), password=password))
