"""A render worker process: opens each PDF once and serves its pages, one request at a time.

Started by the render pool (pagegate.pdf.pool) as `python -m pagegate.pdf.worker`. It
reads `Request`s on stdin and writes `Reply`s on stdout (pagegate.pdf.wire). Everything
pdfium does for a run happens in these processes, so a crash (a segfault on a hostile
file) or a hang costs one worker, which the pool kills and replaces, never the run.

The address-space limit (RLIMIT_AS, `--memory-limit-mb`) turns a decompression bomb into
a failed allocation in this process instead of a machine that swaps: pdfium then fails
the call or aborts, Python raises MemoryError; either way only this worker goes. The
pixel cap of `plan_render` bounds the bitmap of any page shape on top of it.

SESSION: workers run in a session of their own. A terminal's Ctrl-C goes to its whole
foreground process group, and a worker it reached mid-import or mid-page would print a
traceback or lose a page while the run winds down on its own terms. The pool ends a
worker by closing its stdin (or killing it), and the CLI reaps any left at exit.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import resource
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from pagegate.errors import InputError
from pagegate.heap import bound_heap
from pagegate.pdf.document import OpenPdf, open_pdf
from pagegate.pdf.reader import check_page_count, page_text, render_page
from pagegate.pdf.wire import PdfSource, Reply, Request, read_message, write_message

READY = "ready"


class Worker:
    """The documents this process holds open and the operations on them."""

    def __init__(self, *, target_longest_dim: int, max_pixels: int, dpi: float | None = None,
                 target_shortest_dim: int | None = None) -> None:
        self.target_longest_dim = target_longest_dim
        self.max_pixels = max_pixels
        self.dpi = dpi
        self.target_shortest_dim = target_shortest_dim
        self.docs: dict[str, OpenPdf] = {}

    def handle(self, request: Request) -> Reply:
        for key in request.evict:
            doc = self.docs.pop(key, None)
            if doc is not None:
                doc.close()
        try:
            return Reply(value=self._run(request))
        except InputError as exc:
            return Reply(error=type(exc).__name__, message=str(exc))
        except MemoryError:
            return Reply(error="RenderFailedError", message="the render worker ran out of memory",
                         fatal=True)
        except RecursionError as exc:
            return Reply(error="CorruptPdfError", message=f"too deeply nested: {exc}")
        except Exception as exc:  # pdfium or PIL failing on this page: the page is unusable
            return Reply(error="CorruptPdfError", message=f"{type(exc).__name__}: {exc}")

    def _run(self, request: Request) -> Any:
        if request.op == "stats":
            return {"maxrss_kb": peak_rss_kb(), "open_documents": len(self.docs)}
        if request.op == "count":
            return _count(_required(request.source), request.password)
        if request.op == "inspect":
            self._close(request.key)
            source = _required(request.source)
            doc = open_pdf(_input(source), password=request.password,
                           use_pdfium=request.use_pdfium, source=source.key)
            try:
                info = check_page_count(doc.info, request.max_pages, source.key)
            except InputError:
                doc.close()
                raise
            self.docs[request.key] = doc
            return info
        doc = self.document(request)
        if request.op == "render":
            return render_page(doc, request.page, target_longest_dim=self.target_longest_dim,
                               rotation=request.rotation, max_pixels=self.max_pixels,
                               dpi=self.dpi, target_shortest_dim=self.target_shortest_dim)
        if request.op == "text":
            if not request.use_pdfium:
                return _pypdf_text(doc, request.page)
            return page_text(doc, request.page)
        raise ValueError(f"unknown operation {request.op!r}")

    def document(self, request: Request) -> OpenPdf:
        """The request's document, opened from its source if this worker has not yet."""
        doc = self.docs.get(request.key)
        if doc is None or (doc.pdfium is not None and not request.use_pdfium):
            self._close(request.key)
            source = _required(request.source)
            doc = open_pdf(_input(source), password=source.password,
                           use_pdfium=source.use_pdfium and request.use_pdfium,
                           source=source.key)
            self.docs[request.key] = doc
        return doc

    def _close(self, key: str) -> None:
        doc = self.docs.pop(key, None)
        if doc is not None:
            doc.close()


def peak_rss_kb() -> int:
    """This process's own peak resident set. Not ru_maxrss: Linux carries that across
    exec, so a fresh worker would report its parent's peak at the time it was started."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _count(source: PdfSource, password: str | None) -> int:
    """Pages of a document opened only to count them: nothing stays open afterwards."""
    with open_pdf(_input(source), password=password, source=source.key) as doc:
        return doc.page_count


def _pypdf_text(doc: OpenPdf, page: int) -> str:
    text: str = doc.pypdf_reader().pages[page].extract_text()
    return text.strip()


def _required(source: PdfSource | None) -> PdfSource:
    if source is None:
        raise ValueError("the document is not open in this worker and no source was sent")
    return source


def _input(source: PdfSource) -> bytes | Path:
    return source.data if source.data is not None else Path(str(source.path))


def _private_stdout() -> IO[bytes]:
    """The reply channel: a copy of fd 1, after which fd 1 (prints, native libraries'
    chatter) goes to stderr and cannot corrupt the stream."""
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


def limit_memory(megabytes: int | None) -> None:
    if megabytes:
        limit = megabytes * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def serve(
    requests: IO[bytes], replies: IO[bytes], worker: Worker,
    before: Callable[[Worker, Request], None] | None = None,
) -> None:
    """Answer requests until stdin closes. `before` runs ahead of each request (tests
    plant faults with it)."""
    write_message(replies, Reply(value=READY))
    while (request := read_message(requests)) is not None:
        if before is not None:
            before(worker, request)
        reply = worker.handle(request)
        write_message(replies, reply)
        if reply.fatal:
            return


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pagegate.pdf.worker")
    p.add_argument("--target-longest-dim", type=int, required=True)
    p.add_argument("--max-pixels", type=int, required=True)
    p.add_argument("--memory-limit-mb", type=int, default=0)
    p.add_argument("--dpi", type=float, default=None)
    p.add_argument("--target-shortest-dim", type=int, default=None)
    return p.parse_args(argv)


def main(
    argv: list[str] | None = None, before: Callable[[Worker, Request], None] | None = None
) -> int:
    args = parse_args(argv)
    replies = _private_stdout()
    # pypdf warns on every repair it makes; the pool reports what matters.
    logging.basicConfig(level=logging.WARNING, format="pagegate render worker: %(message)s")
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    limit_memory(args.memory_limit_mb)
    bound_heap()  # bitmaps and PNGs come and go page after page
    worker = Worker(target_longest_dim=args.target_longest_dim, max_pixels=args.max_pixels,
                    dpi=args.dpi, target_shortest_dim=args.target_shortest_dim)
    with contextlib.suppress(BrokenPipeError):  # the pool went away
        serve(sys.stdin.buffer, replies, worker, before)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
