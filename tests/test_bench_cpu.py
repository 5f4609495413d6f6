"""The real-engine bench's CPU accounting and pinning (bench/vllm_server.py,
`group_cpu_seconds` and `pin_group`; bench/vllm_cpu.py, `--pin`): on two shared cores,
what each server process spends, and what it shares, is part of the evidence."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.vllm_cpu import HOST_CPU, WORKER_CPU, pinned_cpus
from bench.vllm_server import (
    group_cpu_seconds,
    host_cpu_ticks,
    pin_group,
    steal_share,
    stop_process_group,
)


def _stat(root: Path, pid: int, name: str, pgrp: int, utime: int, stime: int) -> None:
    # /proc/PID/stat: pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
    # majflt cmajflt utime stime ...; a name may hold spaces and parentheses.
    (root / str(pid)).mkdir()
    (root / str(pid) / "stat").write_text(
        f"{pid} ({name}) S 1 {pgrp} {pgrp} 0 -1 0 0 0 0 0 {utime} {stime} 0 0 20 0 1 0\n")


def _proc_stat(root: Path, user: int, idle: int, steal: int, guest: int) -> None:
    # cpu user nice system idle iowait irq softirq steal guest guest_nice, then per CPU
    (root / "stat").write_text(
        f"cpu  {user} 0 10 {idle} 0 0 0 {steal} {guest} 0\n"
        f"cpu0 {user} 0 10 {idle} 0 0 0 {steal} {guest} 0\nintr 1 2 3\n")


def test_steal_is_the_share_of_all_cpu_time_between_two_readings(tmp_path: Path) -> None:
    _proc_stat(tmp_path, user=100, idle=50, steal=40, guest=7)
    before = host_cpu_ticks(tmp_path)
    assert before == (40, 200)  # guest time is inside user: not counted twice
    _proc_stat(tmp_path, user=160, idle=70, steal=60, guest=7)
    after = host_cpu_ticks(tmp_path)
    assert steal_share(before, after) == pytest.approx(20 / 100)
    assert steal_share(after, after) == 0.0


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


def test_pin_gives_the_worker_a_cpu_of_its_own() -> None:
    assert pinned_cpus("VLLM::Worker") == {WORKER_CPU}
    for name in ("python", "VLLM::EngineCor"):  # API server, engine core (comm is 15 chars)
        assert pinned_cpus(name) == {HOST_CPU}
    assert WORKER_CPU != HOST_CPU


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_pin_group_binds_every_thread_of_every_process_in_the_group() -> None:
    # A leader with a second thread and a child in its group: all three threads are bound.
    code = ("import subprocess, sys, threading, time; "
            "threading.Thread(target=time.sleep, args=(60,), daemon=True).start(); "
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "print(child.pid, flush=True); time.sleep(60)")
    leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              start_new_session=True)
    try:
        assert leader.stdout is not None
        child = int(leader.stdout.readline())
        target = max(os.sched_getaffinity(0))
        placed = pin_group(leader.pid, lambda name: {target})
        assert placed and all(cpus == [target] for cpus in placed.values())
        tids = [int(t.name) for pid in (leader.pid, child)
                for t in Path(f"/proc/{pid}/task").iterdir()]
        assert len(tids) >= 3
        assert all(os.sched_getaffinity(tid) == {target} for tid in tids)
    finally:
        stop_process_group(leader, grace_s=1.0)
