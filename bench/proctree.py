"""Peak memory of a process and all its descendants, sampled from /proc (Linux).

Each process's own peak is its `VmHWM` (the kernel's high-water mark of its resident set,
reset at exec, so a child does not inherit its parent's), read at every sample while it
lives: exact up to growth in its last interval. The tree's peak is the largest sum of
`VmRSS` over one sample. Processes are named by role from their command line: the run
itself, render workers, counting workers (the same program, started with a 1-pixel
render size), Prefect's temporary server, anything else.
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path


def _status(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("PPid", "VmHWM", "VmRSS"):
                out[key] = int(value.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def role(command: str) -> str:
    if "pagegate.pdf.worker" in command or "fault_worker" in command:
        return "count worker" if "--max-pixels 1 " in command + " " else "render worker"
    if "prefect" in command and ("server" in command or "uvicorn" in command):
        return "prefect server"
    if "pagegate" in command and " run " in f" {command} ":
        return "run"
    return "other"


@dataclass
class TreeSample:
    peak_kb: dict[int, int] = field(default_factory=dict)
    roles: dict[int, str] = field(default_factory=dict)
    tree_peak_kb: int = 0

    def by_role(self) -> dict[str, list[float]]:
        """Each role's processes' peaks in MB, largest first."""
        found: dict[str, list[float]] = defaultdict(list)
        for pid, peak in self.peak_kb.items():
            found[self.roles[pid]].append(round(peak / 1024, 1))
        return {name: sorted(peaks, reverse=True) for name, peaks in found.items()}


class TreeSampler:
    """Samples `root` and its descendants every `interval` seconds in a thread."""

    def __init__(self, root: int, interval: float = 0.25) -> None:
        self.root = root
        self.interval = interval
        self.result = TreeSample()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _descendants(self) -> list[int]:
        parents: dict[int, list[int]] = defaultdict(list)
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                ppid = _status(int(entry)).get("PPid")
                if ppid is not None:
                    parents[ppid].append(int(entry))
        found, todo = [], [self.root]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo += parents.get(pid, [])
        return found

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            total = 0
            for pid in self._descendants():
                status = _status(pid)
                if "VmHWM" not in status:
                    continue
                if pid not in self.result.roles:
                    named = "run" if pid == self.root else role(_cmdline(pid))
                    if named == "run" and pid != self.root:
                        continue  # forked, not yet exec'd: its figures are the run's
                    self.result.roles[pid] = named
                self.result.peak_kb[pid] = max(self.result.peak_kb.get(pid, 0), status["VmHWM"])
                total += status.get("VmRSS", 0)
            self.result.tree_peak_kb = max(self.result.tree_peak_kb, total)
