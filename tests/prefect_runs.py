"""Helpers for tests that run flows in a separate worker or serve process: read the
process's log, stop it, and poll the Prefect API until a flow run is final."""

from __future__ import annotations

import asyncio
import subprocess
import time
from typing import IO, Any


def log_tail(log: IO[bytes], chars: int = 4000) -> str:
    """The end of a process log kept in a temporary file (never a pipe it could fill)."""
    log.seek(0)
    return log.read().decode(errors="replace")[-chars:]


def stop_process(process: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s`; returns once the process is gone."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


async def wait_final(flow_run_id: Any, log: IO[bytes], *, timeout_s: float, runs: int = 1) -> Any:
    """Poll the API until the run is final with run_count >= `runs` (a worker runs it)."""
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + timeout_s
    async with get_client() as client:
        while time.monotonic() < deadline:
            run = await client.read_flow_run(flow_run_id)
            if run.state is not None and run.state.is_final() and run.run_count >= runs:
                return run
            await asyncio.sleep(0.5)  # polling the API for a state, not waiting for an effect
    raise AssertionError(f"flow run {flow_run_id} not final in {timeout_s} s:\n{log_tail(log)}")
