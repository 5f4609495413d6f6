"""kill -9 of pagegate must not leave the launched server's process group running (Linux).

A stand-in for pagegate launches the simulator through VllmLauncher; the launched command
also starts a grandchild (`sleep`), as vLLM starts engine-core and worker processes.
Then the stand-in is killed -9: no `finally`, no stop(). The reaper must kill the group.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from pagegate.sim.process import free_port
from tests.helpers import REPO

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")]

STAND_IN = """
import asyncio, sys
import httpx
from pagegate.server.launcher import VllmLauncher
from pagegate.server.settings import VllmSettings

async def main() -> None:
    settings = VllmSettings(model="m", command=sys.argv[1], port=int(sys.argv[2]),
                            limit_mm_per_prompt=None)
    async with httpx.AsyncClient() as http:
        launcher = VllmLauncher(settings, http=http, ready_timeout_seconds=30)
        await launcher.start()
        print(launcher.pid, flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


def group_members(group: int) -> list[int]:
    """Live processes whose process group is `group` (from /proc/PID/stat, field 5)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == group and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def test_kill_9_of_pagegate_takes_the_server_group_with_it(tmp_path: Path) -> None:
    port = free_port()
    sim = f"{shlex.quote(sys.executable)} -m pagegate.sim --profile ci"
    command = f"sh -c 'sleep 300 & exec {sim} \"$@\"' sh"
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    pagegate = subprocess.Popen([sys.executable, str(script), command, str(port)], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    group = 0
    try:
        assert pagegate.stdout is not None
        group = int(pagegate.stdout.readline())  # the server leads its own group
        members = group_members(group)
        assert group in members and len(members) >= 2, "the server and its grandchild run"
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200

        pagegate.kill()
        pagegate.wait(timeout=10)
        killed_at = time.monotonic()
        while group_members(group):
            assert time.monotonic() - killed_at < 10, f"still running: {group_members(group)}"
            time.sleep(0.02)  # polling /proc for the group to go
        gone_after = time.monotonic() - killed_at
    finally:
        if pagegate.poll() is None:
            pagegate.kill()
            pagegate.wait(timeout=10)
        if group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
    print(f"kill -9 of pagegate: the server's group ({len(members)} processes) gone "
          f"{gone_after:.2f} s later")
