"""Kill a launched server's process group when pagegate dies without stopping it (kill -9).

`python -m pagegate.server.reaper PARENT_PID GROUP_ID` asks Linux to send it SIGTERM when
its parent dies (prctl PR_SET_PDEATHSIG, prctl(2)) and then sleeps. On that signal it
sends SIGKILL to the whole group: vLLM's API server, its engine-core and GPU workers, so
the GPU memory they hold is freed. A separate process does this, not a hook in the
server itself, because the death signal only reaches the direct child and vLLM's
workers are grandchildren. Linux only; elsewhere the reaper exits at once and the
launcher's normal stop (SIGTERM, then SIGKILL to the group) is all there is.

Note that Linux sends the signal when the *thread* that started the reaper exits; the
launcher starts it from the event loop's thread, which outlives the server.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from types import FrameType

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def kill_group(group: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


def ask_for_parent_death_signal(sig: signal.Signals) -> bool:
    """prctl(PR_SET_PDEATHSIG, sig); False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0


def main(argv: list[str]) -> int:
    parent, group = int(argv[0]), int(argv[1])

    def on_parent_death(signum: int, frame: FrameType | None) -> None:
        kill_group(group)
        os._exit(0)

    signal.signal(signal.SIGTERM, on_parent_death)
    if not ask_for_parent_death_signal(signal.SIGTERM):
        return 0
    if os.getppid() != parent:  # the parent died before the request took effect
        kill_group(group)
        return 0
    while True:
        signal.pause()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
