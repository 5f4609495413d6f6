"""A render worker with planted counting faults, for the planner's tests.

Runs the real worker (pagegate.pdf.worker), but before counting a file whose bytes hold
`PAGEGATE-COUNT-HANG` it sleeps past any timeout (a parser in a loop), and on
`PAGEGATE-COUNT-BOMB` it allocates without bound (a decompression bomb) until the
worker's address-space limit stops it. Every other request is left alone.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pagegate.pdf.wire import Request
from pagegate.pdf.worker import Worker, main

HANG = b"PAGEGATE-COUNT-HANG"
BOMB = b"PAGEGATE-COUNT-BOMB"


def plant(worker: Worker, request: Request) -> None:
    if request.op != "count" or request.source is None:
        return
    data = request.source.data or Path(str(request.source.path)).read_bytes()
    if HANG in data:
        time.sleep(3600)
    if BOMB in data:
        held = []
        while True:  # ends in MemoryError under RLIMIT_AS, as a real bomb would
            held.append(bytearray(64 * 2**20))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:], before=plant))
