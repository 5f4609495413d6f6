"""Blocking reads on a bounded thread pool, with results in the order of their inputs.

Planning counts pages and `pagegate stats` reads records by the thousand: each one is a
blocking S3 or disk read, so they run on threads, but in input order (groups then come
out the same on every rerun) and with a window, so a listing of millions is never held.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def ordered_map(fn: Callable[[T], R], items: Iterable[T], *, workers: int) -> Iterator[R]:
    """Like Executor.map, but reads `items` lazily and keeps at most 2*workers in flight."""
    window: deque[Future[R]] = deque()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pagegate-read") as pool:
        for item in items:
            window.append(pool.submit(fn, item))
            if len(window) >= 2 * workers:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()
