"""A workspace that stops taking writes mid-run (pagegate.ocr.halt), through the real CLI.

Local: the workspace is on a tmpfs this test mounts (256 KiB), which fills after a few
dozen documents; it is then grown and the same command is run again. S3: the test's
proxy in front of moto answers AccessDenied to every write once some documents have
landed, as when the run's role loses s3:PutObject; and, separately, a burst of 503s on
commits that botocore's retries ride out.

The pages the simulator answered bound what was sent after the first refused write:
without the halt every remaining page went to the server and was thrown away.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.sim import SimServer
from tests.helpers import metric_total, read_ledger, read_results, write_corpus
from tests.test_when_wrong import SENT, Ran, aws_env, cli

pytestmark = [pytest.mark.slow]

PDFS = 150
IN_FLIGHT = 4  # --no-gate --max-concurrent-requests 4: at most 4 pages on the server
# A stopped run cannot write its last heartbeat either (the workspace refuses it), so its
# claims lapse after the lease, and the rerun waits for them: 10 s here, not the default 60.
LEASE = "10"
# Pages answered but not yet committed when the first write was refused: one commit
# thread each at most (asyncio.to_thread's pool: min(32, cpus + 4)).
COMMITTING = min(32, (os.cpu_count() or 1) + 4)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs at tmp_path/small (mount(8) needs root: skipped without it)."""
    where = tmp_path / "small"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def sent(sim: SimServer) -> float:
    return metric_total(sim.metrics_url, SENT)


def run_args(src: str, ws: str, sim: SimServer) -> tuple[str, ...]:
    return ("run", src, "--workspace", ws, "--server", sim.base_url, "--pages-per-group", "10",
            "--no-gate", "--max-concurrent-requests", str(IN_FLIGHT), "--claim-lease-seconds", LEASE)


# The first write refused can be any of a run's writes: a result, the claim on its next
# group, or a heartbeat, whichever the run's tasks reach first.
REFUSED_KEY = r"(results|claims|heartbeats)/\S+"


def check_stopped(ran: Ran, ws: str, committed: int, pages_sent: float, why: str) -> None:
    """Exit 4, pagegate's one line (`why`: a pattern), no traceback, and no page sent
    past the bound."""
    assert ran.code == 4, ran.err[-3000:]
    assert re.fullmatch(
        re.escape(f"error: the workspace {ws} stopped taking writes (") + why
        + re.escape(f"); {committed} documents committed, {PDFS - committed} PDFs not done: "
                    "free space or fix access, then rerun the same command"),
        ran.last_line,
    ), ran.err[-3000:]
    assert "Traceback" not in ran.err, ran.err[-3000:]
    assert ran.out.startswith(f"PDFs ok: {committed}  failed: 0  skipped: 0  "
                              f"not done: {PDFS - committed}  ")
    assert 0 < committed < PDFS
    print(f"pages sent {pages_sent:.0f}, documents committed {committed}")
    assert pages_sent <= committed + IN_FLIGHT + COMMITTING


def test_a_local_workspace_that_fills_up_then_space_is_back(
    sim: SimServer, small_fs: Path, tmp_path: Path, api_env: dict[str, str]
) -> None:
    write_corpus(tmp_path / "in", PDFS, pages=1)
    ws = small_fs / "ws"
    args = run_args(str(tmp_path / "in"), str(ws), sim)
    before = sent(sim)
    ran = cli(*args, env=api_env)
    docs = read_results(ws)  # parses each one: every committed document is whole
    kept = len(docs)
    check_stopped(ran, str(ws), kept, sent(sim) - before,
                  re.escape(f"cannot write {ws}/") + REFUSED_KEY
                  + r": \[Errno 28\] No space left on device")
    assert read_ledger(ws) == {}  # nothing is wrong with the PDFs left
    # Through Prefect: the flow run ended Failed with the same line as its message.
    state = last_flow_run_state()
    assert state.is_failed() and f"error: {state.message}" == ran.last_line

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_fs)], check=True)
    again = cli(*args, env=api_env)
    assert again.code == 0, again.err[-3000:]
    assert again.out.startswith(f"PDFs ok: {PDFS - kept}  failed: 0  skipped: {kept}  ")
    docs = read_results(ws)
    assert len(docs) == PDFS and len({d["id"] for d in docs.values()}) == PDFS


def last_flow_run_state() -> Any:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.sorting import FlowRunSort

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(sort=FlowRunSort.EXPECTED_START_TIME_DESC, limit=1)
    return runs[0].state


def test_an_s3_workspace_whose_writes_are_denied(
    sim: SimServer, s3_proxy: Any, s3_bucket: str, s3_client: Any, tmp_path: Path,
    api_env: dict[str, str],
) -> None:
    write_corpus(tmp_path / "in", PDFS, pages=1)
    ws = f"s3://{s3_bucket}/ws"
    s3_proxy.plan.revoke_after_commits(20)
    env = {**api_env, **aws_env(s3_proxy.endpoint_url)}
    before = sent(sim)
    ran = cli(*run_args(str(tmp_path / "in"), ws, sim), env=env)
    listed = s3_client.list_objects_v2(Bucket=s3_bucket, Prefix="ws/results/").get("Contents", [])
    assert len(listed) == 20
    check_stopped(ran, ws, 20, sent(sim) - before,
                  re.escape(f"cannot write {ws}/") + REFUSED_KEY + ": AccessDenied")
    s3_proxy.plan.commits_until_revoked = None  # access is back
    again = cli(*run_args(str(tmp_path / "in"), ws, sim), env=env)
    assert again.code == 0, again.err[-3000:]
    assert again.out.startswith(f"PDFs ok: {PDFS - 20}  failed: 0  skipped: 20  ")


def test_a_burst_of_503s_on_commits_is_ridden_out(
    sim: SimServer, s3_proxy: Any, s3_bucket: str, tmp_path: Path, api_env: dict[str, str],
) -> None:
    write_corpus(tmp_path / "in", 20, pages=1)
    s3_proxy.plan.unavailable_commits(6)  # botocore's standard mode tries a PUT up to 11 times
    env = {**api_env, **aws_env(s3_proxy.endpoint_url)}
    ran = cli("run", str(tmp_path / "in"), "--workspace", f"s3://{s3_bucket}/ws", "--server",
              sim.base_url, env=env)
    assert ran.code == 0, ran.err[-3000:]
    assert ran.out.startswith("PDFs ok: 20  failed: 0  ")
    assert s3_proxy.plan.injected["ServiceUnavailable"] == 6
