"""A render worker with planted faults, for the render pool's tests.

Runs the real worker (pagegate.pdf.worker), but before rendering a page whose text layer
holds `PAGEGATE-CRASH` it kills itself with SIGSEGV (as pdfium does on a hostile file), and
on `PAGEGATE-HANG` it sleeps past any timeout. Text extraction is left alone, so the page's
fallback text still comes through.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from pagegate.pdf.reader import page_text
from pagegate.pdf.wire import Request
from pagegate.pdf.worker import Worker, main

CRASH = "PAGEGATE-CRASH"
HANG = "PAGEGATE-HANG"


def plant(worker: Worker, request: Request) -> None:
    if request.op != "render":
        return
    text = page_text(worker.document(request), request.page)
    if CRASH in text:
        os.kill(os.getpid(), signal.SIGSEGV)
    if HANG in text:
        time.sleep(3600)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:], before=plant))
