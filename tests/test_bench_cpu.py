"""The real-engine bench's CPU accounting (bench/vllm_server.py, `group_cpu_seconds`):
on two shared cores, what each server process spends is part of the evidence."""

from __future__ import annotations

import os
from pathlib import Path

from bench.vllm_server import group_cpu_seconds


def _stat(root: Path, pid: int, name: str, pgrp: int, utime: int, stime: int) -> None:
    # /proc/PID/stat: pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
    # majflt cmajflt utime stime ...; a name may hold spaces and parentheses.
    (root / str(pid)).mkdir()
    (root / str(pid) / "stat").write_text(
        f"{pid} ({name}) S 1 {pgrp} {pgrp} 0 -1 0 0 0 0 0 {utime} {stime} 0 0 20 0 1 0\n")


def test_cpu_is_summed_by_process_name_over_one_process_group(tmp_path: Path) -> None:
    tick = os.sysconf("SC_CLK_TCK")
    _stat(tmp_path, 10, "python", 10, 2 * tick, tick)
    _stat(tmp_path, 11, "VLLM::Worker", 10, 5 * tick, 0)
    _stat(tmp_path, 12, "VLLM::Worker", 10, tick, 0)
    _stat(tmp_path, 13, "odd (name) x", 10, tick, tick)
    _stat(tmp_path, 20, "python", 20, 100 * tick, 0)  # another group: not counted
    (tmp_path / "self").mkdir()                       # not a pid
    assert group_cpu_seconds(10, tmp_path) == {"python": 3.0, "VLLM::Worker": 6.0,
                                               "odd (name) x": 2.0}
