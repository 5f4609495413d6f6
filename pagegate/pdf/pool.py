"""The render pool: N worker processes with their own pdfium, driven from the event loop.

Why processes: pdfium is not thread-safe (one thread caps a node at one core), a hostile
file can segfault it (in-process that kills the run) or hang it (a thread cannot be
killed). Here each worker (pagegate.pdf.worker) is a child process spoken to over pipes
with asyncio, so the event loop never blocks on rendering; a request that outlives
`timeout_seconds`, or a worker that dies, costs that one request: the worker is killed
and a fresh one is started on next use.

Documents stay open in a worker between pages: the first request of a document on a
worker carries its bytes (or its file path) once, and later pages only name it. A page
goes preferably to an idle worker that has its document open. Each worker keeps at most
`docs_per_worker` documents; the pool decides what a worker closes (`Request.evict`), so
the two sides never disagree about what is open.

A document that kills workers (`max_losses` crashes or hangs) is marked: it is not
rendered again, and its text comes from pypdf, so a PDF that crashes pdfium on every
page costs a couple of worker restarts, not one per page.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from types import TracebackType
from typing import TypeVar

from pagegate import errors
from pagegate.errors import CorruptPdfError, InputError, RenderFailedError
from pagegate.pdf.wire import ROTATIONS, PdfInfo, PdfSource, RenderedPage, Reply, Request
from pagegate.pdf.worker_process import (
    PoolSettings,
    PoolStats,
    WorkerProcess,
    usable_cores,
)

__all__ = ["PoolSettings", "PoolStats", "RenderPool", "usable_cores"]

log = logging.getLogger("pagegate.render")
T = TypeVar("T")

class RenderPool:
    """Render pages, extract text and inspect PDFs in worker processes.

    Implements `pagegate.pdf.renderer.Renderer`. Create it in the event loop that uses it
    (its pipes belong to that loop) and use it as an async context manager.
    """

    def __init__(self, settings: PoolSettings | None = None, *,
                 command: Sequence[str] | None = None) -> None:
        self.settings = settings or PoolSettings()
        s = self.settings
        worker_args = ["--target-longest-dim", str(s.target_longest_dim),
                       "--max-pixels", str(s.max_pixels),
                       "--memory-limit-mb", str(s.memory_limit_mb or 0)]
        if s.dpi is not None:
            worker_args += ["--dpi", repr(s.dpi)]
        if s.target_shortest_dim is not None:
            worker_args += ["--target-shortest-dim", str(s.target_shortest_dim)]
        base = list(command) if command is not None else [sys.executable, "-m",
                                                          "pagegate.pdf.worker"]
        self.command = [*base, *worker_args]
        self.stats = PoolStats()
        self._workers = [WorkerProcess(self.command, self.stats, s.timeout_seconds)
                         for _ in range(s.worker_count)]
        self._idle: list[WorkerProcess] = list(self._workers)
        self._waiting: deque[tuple[str, asyncio.Future[WorkerProcess]]] = deque()
        self._losses: dict[str, int] = {}
        self._closed = False

    @property
    def workers(self) -> int:
        return len(self._workers)

    async def start(self) -> None:
        """Start every worker now (otherwise each starts on first use)."""
        await asyncio.gather(*(w.ensure_started() for w in self._workers))

    async def close(self) -> None:
        self._closed = True
        await asyncio.gather(*(w.close() for w in self._workers))

    async def __aenter__(self) -> RenderPool:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    # ------------------------------------------------------------------ operations

    async def inspect(self, source: PdfSource, *, password: str | None,
                      max_pages: int | None) -> PdfInfo:
        """Validate and count pages (pdfium, else pypdf). A worker lost on pdfium is
        followed by a pypdf-only attempt; both lost is RenderFailedError."""
        request = Request("inspect", key=source.key, source=source, password=password,
                          max_pages=max_pages)
        try:
            return await self._value(request, PdfInfo)
        except WorkerProcess.Lost as pdfium_lost:
            self._losses[source.key] = self.settings.max_losses
            try:
                return await self._value(replace(request, use_pdfium=False), PdfInfo)
            except WorkerProcess.Lost as pypdf_lost:
                raise RenderFailedError(f"cannot inspect PDF (pdfium: {pdfium_lost}; "
                                        f"pypdf: {pypdf_lost})", source=source.key) from None

    async def render(self, source: PdfSource, page_index: int, *, rotation: int) -> RenderedPage:
        """Page `page_index` as PNG. Raises InputError (RenderFailedError for a lost worker)."""
        if rotation not in ROTATIONS:
            raise ValueError(f"rotation must be one of {ROTATIONS}, got {rotation!r}")
        if not self._pdfium_usable(source):
            raise CorruptPdfError("pdfium cannot render this PDF (it failed to open it, "
                                  "or crashed or hung on it)", source=source.key)
        request = Request("render", key=source.key, page=page_index, rotation=rotation)
        try:
            return await self._value(request, RenderedPage, source)
        except WorkerProcess.Lost as exc:
            self._losses[source.key] = self._losses.get(source.key, 0) + 1
            raise RenderFailedError(str(exc), source=source.key) from None

    async def text(self, source: PdfSource, page_index: int) -> str:
        """The page's text layer; pypdf alone when pdfium is not usable on it or a worker
        is lost reading it with pdfium."""
        use_pdfium = self._pdfium_usable(source)
        request = Request("text", key=source.key, page=page_index, use_pdfium=use_pdfium)
        try:
            return await self._value(request, str, source)
        except WorkerProcess.Lost as first:
            if not use_pdfium:
                raise RenderFailedError(f"page {page_index + 1} text: {first}") from None
            self._losses[source.key] = self._losses.get(source.key, 0) + 1
        try:
            return await self._value(replace(request, use_pdfium=False), str, source)
        except WorkerProcess.Lost as second:
            raise RenderFailedError(f"page {page_index + 1} text: {second}") from None

    def forget(self, source: PdfSource) -> None:
        """The document is done: every worker closes it with its next request."""
        self._losses.pop(source.key, None)
        for worker in self._workers:
            if source.key in worker.docs:
                del worker.docs[source.key]
                worker.evict.add(source.key)

    async def worker_peaks_kb(self) -> list[int]:
        """Each running worker's peak resident set (KiB), for benchmarks."""
        peaks = []
        for _ in self._workers:
            reply = await self._call(Request("stats"))
            peaks.append(int(reply.value["maxrss_kb"]))
        return peaks

    def _pdfium_usable(self, source: PdfSource) -> bool:
        return source.use_pdfium and self._losses.get(source.key, 0) < self.settings.max_losses

    # ------------------------------------------------------------------ dispatch

    async def _value(self, request: Request, kind: type[T],
                     source: PdfSource | None = None) -> T:
        reply = await self._call(request, source)
        if reply.error is not None:
            cls = getattr(errors, reply.error, None)
            if not (isinstance(cls, type) and issubclass(cls, InputError)):
                cls = CorruptPdfError
            raise cls(reply.message, source=request.key or None)
        value = reply.value
        if not isinstance(value, kind):
            raise TypeError(f"render worker answered {request.op} with {type(value).__name__}")
        return value

    async def _call(self, request: Request, source: PdfSource | None = None) -> Reply:
        """Send `request` to a worker (with `source` if that worker lacks the document).

        The exchange runs in its own task: a caller cancelled mid-request must not leave
        a reply unread in the pipe, so the exchange finishes and frees the worker anyway.
        """
        if self._closed:
            raise RuntimeError("the render pool is closed")
        worker = await self._acquire(request.key)
        exchange = asyncio.ensure_future(self._exchange(worker, request, source))
        return await asyncio.shield(exchange)

    async def _exchange(self, worker: WorkerProcess, request: Request,
                        source: PdfSource | None) -> Reply:
        try:
            await worker.ensure_started()
            request = self._addressed(worker, request, source)
            self.stats.requests += 1
            return await worker.call(request)
        finally:
            self._release(worker)

    def _addressed(self, worker: WorkerProcess, request: Request,
                   source: PdfSource | None) -> Request:
        """The request with what this worker must close, and the source if it needs it."""
        key = request.key
        if not key:
            return request
        if request.op == "inspect":
            worker.docs.pop(key, None)
        elif key in worker.docs:
            worker.docs.move_to_end(key)
            if request.use_pdfium:  # else the worker may need to reopen it without pdfium
                source = None
        evict = set(worker.evict)
        worker.evict.clear()
        while len(worker.docs) >= self.settings.docs_per_worker:
            oldest, _ = worker.docs.popitem(last=False)
            evict.add(oldest)
        worker.docs[key] = None
        evict.discard(key)
        if request.op == "inspect":
            return replace(request, evict=tuple(sorted(evict)))
        return replace(request, source=source, evict=tuple(sorted(evict)))

    async def _acquire(self, key: str) -> WorkerProcess:
        if self._idle and not self._waiting:
            worker = next((w for w in self._idle if key and key in w.docs), None)
            worker = worker or min(self._idle, key=lambda w: len(w.docs))
            self._idle.remove(worker)
            return worker
        future: asyncio.Future[WorkerProcess] = asyncio.get_running_loop().create_future()
        entry = (key, future)
        self._waiting.append(entry)
        try:
            return await future
        except asyncio.CancelledError:
            if entry in self._waiting:
                self._waiting.remove(entry)
            elif future.done() and not future.cancelled():
                self._release(future.result())
            raise

    def _release(self, worker: WorkerProcess) -> None:
        """Hand the worker to a waiter, preferring (among the next few) one whose
        document it has open, else the longest-waiting one; or mark it idle."""
        while self._waiting:
            window = list(self._waiting)[: 2 * len(self._workers)]
            chosen = next((e for e in window if e[0] and e[0] in worker.docs), window[0])
            self._waiting.remove(chosen)
            if not chosen[1].done():
                chosen[1].set_result(worker)
                return
        self._idle.append(worker)
