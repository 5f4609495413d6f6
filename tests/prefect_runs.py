"""Helpers for tests that run flows in a separate worker or serve process: read the
process's log, stop it, and poll the Prefect API until a flow run (or its task runs)
is final."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Mapping
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


async def wait_task_runs_final(
    flow_run_id: Any, expected: Mapping[str, int], *, timeout_s: float = 60.0
) -> list[Any]:
    """Poll until the flow run has at least `expected[prefix]` task runs named `prefix...`
    for every prefix, all in a final state; return all its task runs, oldest first.

    Why: a final flow run does not mean its task runs are written yet. Prefect 3 records
    task-run state changes from events in the background (the server's task_run_recorder
    service), so the last ones can still read Pending/Running, or be missing, for a few
    seconds after the flow run is final.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    deadline = time.monotonic() + timeout_s
    runs: list[Any] = []
    async with get_client() as client:
        while True:
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
            )
            counts_met = all(
                sum(r.name.startswith(prefix) for r in runs) >= count
                for prefix, count in expected.items()
            )
            if counts_met and all(r.state is not None and r.state.is_final() for r in runs):
                return sorted(runs, key=lambda r: (r.created is None, r.created, r.name))
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.5)  # polling the API for a state, not waiting for an effect
    seen = [(r.name, r.state.name if r.state else None) for r in runs]
    raise AssertionError(
        f"task runs of {flow_run_id} not all present and final in {timeout_s} s "
        f"(expected {dict(expected)}): {seen}"
    )
