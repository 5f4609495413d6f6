"""One render worker process as the pool sees it: start it, send a request, read the reply
within a timeout, kill it when it hangs, notice when it died.

The process is `python -m pagegate.pdf.worker` (or a test's stand-in) with pipes on its
stdin and stdout, driven by asyncio so the event loop never waits on it. What the pool
knows the worker holds open (`docs`, `evict`) lives here too, and is forgotten whenever
the process goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from pagegate.pdf.wire import (
    DEFAULT_MAX_PIXELS,
    LENGTH_SIZE,
    Reply,
    Request,
    decode,
    encode,
    length_of,
)

_STARTUP_TIMEOUT_SECONDS = 120.0  # imports on a loaded 2-core machine; not a render


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class PoolSettings:
    """How many workers, and what bounds each request and each worker."""

    workers: int | None = None                 # None: usable_cores()
    timeout_seconds: float = 120.0             # one request (olmOCR gives pdftoppm 120 s)
    memory_limit_mb: int | None = 1024         # RLIMIT_AS per worker; None: no limit
    target_longest_dim: int = 1288
    max_pixels: int = DEFAULT_MAX_PIXELS
    dpi: float | None = None                   # a model profile's image rule instead of the longest side
    target_shortest_dim: int | None = None
    docs_per_worker: int = 4
    max_losses: int = 2                        # worker deaths on one document before it is marked

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise ValueError("render workers must be at least 1")
        if self.timeout_seconds <= 0 or self.docs_per_worker < 1 or self.max_losses < 1:
            raise ValueError("timeout_seconds, docs_per_worker and max_losses must be positive")

    @property
    def worker_count(self) -> int:
        return self.workers if self.workers is not None else usable_cores()


@dataclass
class PoolStats:
    requests: int = 0
    crashes: int = 0
    timeouts: int = 0
    out_of_memory: int = 0
    started: int = 0
    bytes_sent: int = 0


class WorkerProcess:
    """One child process and what the pool knows it holds open."""

    class Lost(Exception):
        """The process died or was killed mid-request; the pool turns it into
        RenderFailedError, so it never leaves the pdf package."""

    def __init__(self, command: Sequence[str], stats: PoolStats, timeout_seconds: float) -> None:
        self.command = command
        self.stats = stats
        self.timeout_seconds = timeout_seconds
        self.proc: asyncio.subprocess.Process | None = None
        self.docs: OrderedDict[str, None] = OrderedDict()
        self.evict: set[str] = set()

    async def ensure_started(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            return
        self.docs.clear()
        self.evict.clear()
        self.proc = await asyncio.create_subprocess_exec(
            *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            start_new_session=True,  # see pagegate.pdf.worker: SESSION
        )
        self.stats.started += 1
        ready = await self._read(_STARTUP_TIMEOUT_SECONDS, "starting")
        if ready.error is not None:
            raise RuntimeError(f"render worker failed to start: {ready.message}")

    async def call(self, request: Request) -> Reply:
        await self.ensure_started()
        assert self.proc is not None and self.proc.stdin is not None
        frame = encode(request)
        try:
            self.proc.stdin.write(frame)
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            await self._lost()
            raise WorkerProcess.Lost(f"the render worker crashed{self._how()}") from exc
        if request.source is not None:
            self.stats.bytes_sent += request.source.size
        reply = await self._read(self.timeout_seconds, request.op)
        if reply.fatal:
            self.stats.out_of_memory += 1
            await self.kill()
        return reply

    async def _read(self, timeout: float, what: str) -> Reply:
        assert self.proc is not None and self.proc.stdout is not None
        stdout = self.proc.stdout
        try:
            async with asyncio.timeout(timeout):
                prefix = await stdout.readexactly(LENGTH_SIZE)
                body = await stdout.readexactly(length_of(prefix))
        except TimeoutError:
            self.stats.timeouts += 1
            await self.kill()
            raise WorkerProcess.Lost(f"the render worker hung: no answer to {what} "
                             f"within {timeout:g} s") from None
        except (asyncio.IncompleteReadError, ConnectionResetError):
            await self._lost()
            raise WorkerProcess.Lost(f"the render worker crashed{self._how()}") from None
        reply = decode(body)
        assert isinstance(reply, Reply)
        return reply

    async def _lost(self) -> None:
        self.stats.crashes += 1
        await self.kill()

    def _how(self) -> str:
        code = self.proc.returncode if self.proc is not None else None
        if code is None:
            return ""
        if code < 0:
            with contextlib.suppress(ValueError):
                return f" ({signal.Signals(-code).name})"
        return f" (exit status {code})"

    async def kill(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        await proc.wait()
        self.docs.clear()
        self.evict.clear()

    async def close(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            async with asyncio.timeout(5.0):
                await proc.wait()
        except TimeoutError:
            await self.kill()
