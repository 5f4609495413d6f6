"""Keep glibc from holding on to memory a long-running process has freed.

A run passes large short-lived buffers through its heap, page after page: the PNG a
render worker sends back (~250 KB), its base64 form and the JSON request around it,
downloaded PDF bytes. glibc's malloc serves a block that large with mmap and unmaps it on
free, but only below its *dynamic* mmap threshold: the first such block freed raises the
threshold to its size (up to 32 MB), and from then on these buffers come from the heap,
whose free space is seldom returned to the system. With several threads (the to_thread
pool, the planner's readers) each gets an arena of its own, up to eight per core. On
`bench.memory --tree 1000` the run process then climbs from ~160 to ~270 MB and stays
there, with ~15 MB of live Python objects; with the threshold pinned at 128 KiB and two
arenas it stays between 145 and 170 MB.

`bound_heap()` sets both (mallopt M_MMAP_THRESHOLD, which also turns the dynamic
adjustment off, and M_ARENA_MAX), the same as MALLOC_MMAP_THRESHOLD_=131072 and
MALLOC_ARENA_MAX=2 in the environment, which it leaves alone when they are set.
`trim()` hands free heap pages back (malloc_trim), for a point where much was just freed.
Both do nothing off glibc.
"""

from __future__ import annotations

import ctypes
import os
import platform

MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's own default, held fixed
ARENA_MAX = 2

_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def _libc() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def bound_heap() -> bool:
    """Pin the mmap threshold and cap the arenas; False when this is not glibc."""
    libc = _libc()
    if libc is None:
        return False
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    if "MALLOC_ARENA_MAX" not in os.environ:
        libc.mallopt(_M_ARENA_MAX, ARENA_MAX)
    return True


def trim() -> None:
    """Return free heap memory to the system now (glibc only)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
