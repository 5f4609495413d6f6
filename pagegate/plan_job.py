"""Count a PDF's pages for planning, reading many PDFs at once but in listing order.

Counting pages means reading each PDF once (pypdf needs the whole file); the reads run
on a bounded pool, in listing order, so the groups come out the same on every rerun.
A PDF that cannot be read or opened still gets a group: its group task records why.
`pagegate.pending` uses these to plan only what is left to do.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from pagegate.errors import InputError
from pagegate.pdf import inspect_pdf
from pagegate.planning import PlannedPdf
from pagegate.storage import read_uri

log = logging.getLogger("pagegate.plan")

T = TypeVar("T")
R = TypeVar("R")


def ordered_map(fn: Callable[[T], R], items: Iterable[T], *, workers: int) -> Iterator[R]:
    """Like Executor.map, but reads `items` lazily and keeps at most 2*workers in flight."""
    window: deque[Future[R]] = deque()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pagegate-plan") as pool:
        for item in items:
            window.append(pool.submit(fn, item))
            if len(window) >= 2 * workers:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()


def count_pages(uri: str, *, s3_client: Any, password: str | None) -> PlannedPdf:
    """Page count of one PDF, or None when it cannot be fetched or opened.

    The password is used only if the PDF needs it (see `pagegate.pdf.inspect_pdf`).
    """
    try:
        data = read_uri(uri, s3_client=s3_client)
        pages: int | None = inspect_pdf(data, password=password, source=uri).page_count
    except InputError as exc:
        log.info("planning: %s cannot be counted (%s); its task will record why", uri, exc)
        pages = None
    return PlannedPdf(uri, pages)
