"""Count pages in worker processes, from blocking code: what planning uses.

Planning counts every listed PDF before the first group starts. Parsed in the run's own
process, real-world files cost it hundreds of MB (pypdf's object tree of a large file,
the whole file's bytes, glibc keeping the freed heap), and a file that sends the parser
into a loop stalls a thread that nothing can stop, so the plan of a whole job never
finishes. Here each count runs in a render worker process (pagegate.pdf.worker, op
"count": pdfium, else pypdf, as the run opens it; nothing stays open): a count that
outlives `timeout_seconds` gets its worker killed, and `memory_limit_mb` (RLIMIT_AS) ends
one that grows without bound. Either way the answer is None, and the file costs only its
own count: the planner gives it a one-page group and its task inspects it again under
the render pool's own limits, recording why in the ledger if it cannot be read.

Thread-safe: the planner's threads share one counter, each count taking an idle worker
(at most `workers` at once). The workers are started on first use and live until
`close()`, so they are gone before the run's render pool starts.
"""

from __future__ import annotations

import logging
import os
import queue
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import TracebackType

from pagegate.pdf.wire import LENGTH_SIZE, PdfSource, Reply, Request, decode, encode, length_of
from pagegate.pdf.worker_process import usable_cores

log = logging.getLogger("pagegate.plan")


@dataclass(frozen=True)
class CountSettings:
    """How many counting processes, and what bounds each count."""

    workers: int | None = None          # None: usable_cores()
    timeout_seconds: float = 60.0       # one file's count; then its worker is killed
    memory_limit_mb: int | None = 1024  # RLIMIT_AS per counting process; None: no limit

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise ValueError("counting workers must be at least 1")
        if self.timeout_seconds <= 0:
            raise ValueError("timeout_seconds must be positive")

    @property
    def worker_count(self) -> int:
        return self.workers if self.workers is not None else usable_cores()


@dataclass
class CountStats:
    counted: int = 0
    unreadable: int = 0   # the file was read, and is not a PDF either library opens
    timeouts: int = 0
    crashes: int = 0      # the process died: out of memory, a native crash
    started: int = 0


class _Lost(Exception):
    """The counting process hung ("timeouts") or died ("crashes"); it has been killed."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class _CountProcess:
    """One blocking child process and its pipes."""

    def __init__(self, command: Sequence[str]) -> None:
        self.command = list(command)
        self.started = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def call(self, request: Request, timeout: float) -> Reply:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE,
                                         start_new_session=True)  # pagegate.pdf.worker: SESSION
            self.started += 1
            try:  # "ready", after the imports: no file is involved yet
                ready = self._read(max(timeout, 120.0))
            except _Lost as lost:
                raise RuntimeError(f"a counting worker did not start ({lost.kind})") from None
            if ready.error is not None:
                raise RuntimeError(f"a counting worker did not start: {ready.message}")
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(encode(request))
            self.proc.stdin.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.kill()
            raise _Lost("crashes") from None
        return self._read(timeout)

    def _read(self, timeout: float) -> Reply:
        """One reply within `timeout`, read straight from the pipe's descriptor (a
        buffered read could not be interrupted at the deadline)."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        prefix = self._read_exactly(fd, LENGTH_SIZE, deadline)
        reply = decode(self._read_exactly(fd, length_of(prefix), deadline))
        assert isinstance(reply, Reply)
        return reply

    def _read_exactly(self, fd: int, size: int, deadline: float) -> bytes:
        chunks: list[bytes] = []
        while size > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                self.kill()
                raise _Lost("timeouts")
            chunk = os.read(fd, min(size, 1 << 20))
            if not chunk:
                self.kill()
                raise _Lost("crashes")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()

    def close(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            self.kill()
            return
        assert proc.stdin is not None
        try:
            proc.stdin.close()
            proc.wait(timeout=5.0)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            pass
        self.kill()


class PageCounter:
    """Page counts from isolated processes; None for a file that cannot be counted."""

    def __init__(self, settings: CountSettings | None = None, *,
                 command: Sequence[str] | None = None) -> None:
        self.settings = settings or CountSettings()
        base = list(command) if command is not None else [sys.executable, "-m",
                                                          "pagegate.pdf.worker"]
        # The render options are the worker's; a count renders nothing.
        self.command = [*base, "--target-longest-dim", "1", "--max-pixels", "1",
                        "--memory-limit-mb", str(self.settings.memory_limit_mb or 0)]
        self._stats = CountStats()
        self._lock = threading.Lock()
        self._all = [_CountProcess(self.command) for _ in range(self.settings.worker_count)]
        self._idle: queue.SimpleQueue[_CountProcess] = queue.SimpleQueue()
        for process in self._all:
            self._idle.put(process)

    def count(self, source: PdfSource, *, password: str | None = None) -> int | None:
        """The page count of `source`, or None when it is no PDF either library opens,
        or when counting it hung or blew up its process."""
        process = self._idle.get()
        try:
            reply = process.call(Request("count", key=source.key, source=source,
                                         password=password), self.settings.timeout_seconds)
            if reply.fatal:  # out of memory: the process exits after this reply
                process.kill()
                raise _Lost("crashes")
        except _Lost as lost:
            self._note(lost.kind)
            why = (f"no answer within {self.settings.timeout_seconds:g} s" if lost.kind == "timeouts"
                   else "the counting process died: out of memory or a native crash")
            log.warning("planning: %s cannot be counted (%s); planned as one page",
                        source.key, why)
            return None
        finally:
            self._idle.put(process)
        if reply.error is not None or not isinstance(reply.value, int):
            self._note("unreadable")
            log.info("planning: %s cannot be counted (%s); its task will record why",
                     source.key, reply.message)
            return None
        self._note("counted")
        return reply.value

    @property
    def stats(self) -> CountStats:
        with self._lock:
            return replace(self._stats, started=sum(p.started for p in self._all))

    def _note(self, outcome: str) -> None:
        with self._lock:
            setattr(self._stats, outcome, getattr(self._stats, outcome) + 1)

    def close(self) -> None:
        for process in self._all:
            process.close()

    def __enter__(self) -> PageCounter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
