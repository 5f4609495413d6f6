"""Scale-out on one machine: two GPU "nodes", one dies mid-shard, every PDF is done once.

Real and out of process, as on a cluster: the session's Prefect API, the `gpu` pool,
the `shard` deployment from prefect.yaml (`prefect deploy --name shard`), and two
`prefect worker start --pool gpu --limit 1` processes. Each worker is a node: its own
simulator process as its vLLM server, named by PAGEGATE_SERVER_URL in the worker's
environment (nothing in the shard's parameters says which server to use), its own
PREFECT_HOME, and flow-run heartbeats every 30 s (Prefect's minimum). Sources,
workspace, manifests and task results share one moto S3 server.

The planner flow runs in this process (a flow run of its own, through the same API).
Once node A's server has answered a few pages of a shard, node A dies: SIGKILL to the
worker's process group and to the flow-run processes under it (Prefect starts those in
a session of their own, so killing the group alone would leave them running, which is
not what a dead machine does), and its simulator goes too. Nobody marks that run
crashed; the planner sees its heartbeat stop, sends it back to the pool, and node B
finishes it. The workspace bucket is versioned, so "exactly once" is checked on the
objects themselves: one version of each result, never rewritten.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from pagegate import samples
from pagegate.output.documents import document_id
from tests.helpers import metric_total, prefect_cli, prefect_env
from tests.prefect_runs import log_tail

# The test's own bounds (180 s to node A's first pages, 240 s for the planner) and the
# deploy in its fixture add up past pytest's 300 s: the outer limit covers the sum, so
# theirs are the ones that report.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api"), pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[1]
PDFS = 6
PAGES = 4
SERVED = "vllm:request_success_total"


@dataclass
class Node:
    name: str
    worker: subprocess.Popen[bytes]
    log: IO[bytes]
    sim: Any


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc (before a kill re-parents them to init)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _kill_worker(node: Node) -> None:
    """The machine dies, its server last: worker group and the flow runs it started."""
    below = _descendants(node.worker.pid)
    os.killpg(node.worker.pid, signal.SIGKILL)
    _kill_all(below)
    node.worker.wait(timeout=10)


def _stop_worker(node: Node) -> None:
    if node.worker.poll() is None:
        below = _descendants(node.worker.pid)
        os.killpg(node.worker.pid, signal.SIGTERM)
        try:
            node.worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(node.worker.pid, signal.SIGKILL)
            node.worker.wait(timeout=10)
        _kill_all(below)


@pytest.fixture
def nodes(tmp_path: Path, s3_env: str, start_sim: Any) -> Iterator[list[Node]]:
    env = prefect_env(tmp_path / "prefect-home")
    prefect_cli(env, "work-pool", "create", "gpu", "--type", "process", "--overwrite")
    out = prefect_cli(env, "deploy", "--name", "shard")
    assert "ocr-pdfs/shard" in out, out
    started: list[Node] = []
    try:
        # A's server is slow (its shard is still going when A dies), B's is quick.
        for name, scale in (("a", 0.1), ("b", 2.0)):
            sim = start_sim(profile="ci", time_scale=scale)
            node_env = {
                **env,
                "PREFECT_HOME": str(tmp_path / f"home-{name}"),
                "PAGEGATE_SERVER_URL": sim.base_url,
                "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30",
            }
            log = tempfile.TemporaryFile()  # noqa: SIM115 (closed below)
            worker = subprocess.Popen(
                [sys.executable, "-m", "prefect", "worker", "start", "--pool", "gpu",
                 "--name", f"node-{name}", "--limit", "1"],
                cwd=REPO, env=node_env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            started.append(Node(name, worker, log, sim))
        yield started
    finally:
        for node in started:
            _stop_worker(node)
            node.log.close()


def _served(node: Node) -> float:
    try:
        return metric_total(node.sim.metrics_url, SERVED)
    except Exception:  # the node is dead
        return 0.0


def test_a_dead_node_s_shard_finishes_on_another_node_and_every_pdf_is_done_once(
    nodes: list[Node], s3_bucket: str, s3_client: Any
) -> None:
    from pagegate.flows.planner import ocr_planner

    a, b = nodes
    s3_client.put_bucket_versioning(
        Bucket=s3_bucket, VersioningConfiguration={"Status": "Enabled"}
    )
    uris = []
    for i in range(PDFS):
        key = f"in/doc{i}.pdf"
        s3_client.put_object(Bucket=s3_bucket, Key=key, Body=samples.text_pdf(PAGES, seed=i))
        uris.append(f"s3://{s3_bucket}/{key}")
    workspace = f"s3://{s3_bucket}/out"

    result: dict[str, Any] = {}

    def run_planner() -> Any:
        run: Any = ocr_planner(
            sources=[f"s3://{s3_bucket}/in/"],
            workspace=workspace,
            pdfs_per_shard=2,
            pages_per_shard=10_000,
            max_running_shards=4,
            sample_size=4,
            # Heartbeats come every 30 s; 55 s leaves room for a late heartbeat reaching
            # the API (events are persisted in batches) and for a slow worker start on a
            # loaded machine (a run Pending that long also counts as dead).
            stale_after_seconds=55,
            poll_seconds=1,
            shard_parameters={"result_storage": f"s3://{s3_bucket}/prefect-results"},
            return_state=True,
        )
        return asyncio.run(run)  # a coroutine; Prefect types it loosely

    def plan_and_run() -> None:
        result["state"] = run_planner()

    planner = threading.Thread(target=plan_and_run)
    planner.start()
    deadline = time.monotonic() + 180  # the shard deployment, workers and A's start-up
    while _served(a) < 2 and planner.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)  # polling node A's server for its first pages, not waiting for an effect
    assert _served(a) >= 2, f"node A never got a shard:\n{log_tail(a.log)}\n{log_tail(b.log)}"
    # Node A's engine hangs at once (the simulator's SIGUSR1), so its shard cannot finish
    # however late this thread gets to the kill; what A served is read once its worker is
    # dead and nothing more of its can commit.
    a.sim.process.send_signal(signal.SIGUSR1)
    _kill_worker(a)
    served_by_a = _served(a)
    a.sim.process.kill()
    committed_at_kill = _committed(s3_client, s3_bucket, uris)
    assert len(committed_at_kill) < PDFS

    planner.join(timeout=240)
    assert not planner.is_alive(), f"planner did not finish:\n{log_tail(b.log)}"
    state = result["state"]
    assert state.is_completed(), f"{state}\n{log_tail(b.log)}"
    summary = asyncio.run(state.aresult())
    assert summary["completed"] == summary["shards"] >= 2
    assert summary["retries"] >= 1  # node A's shard, sent back to the pool once
    assert summary["pdfs"] == PDFS

    # Every PDF committed, each result written exactly once, nothing in the ledger.
    assert _committed(s3_client, s3_bucket, uris) == set(uris)
    for uri in uris:
        versions = s3_client.list_object_versions(
            Bucket=s3_bucket, Prefix=f"out/results/{document_id(uri)}.jsonl"
        ).get("Versions", [])
        assert len(versions) == 1, uri
    listed = s3_client.list_objects_v2(Bucket=s3_bucket, Prefix="out/ledger/")
    assert listed.get("KeyCount", 0) == 0
    # Node B did every page node A had not finished: all pages were served somewhere.
    assert served_by_a + _served(b) >= PDFS * PAGES
    assert _served(b) >= (PDFS - len(committed_at_kill)) * PAGES

    # A second planner over the same keys gets the same shard runs back (idempotency keys
    # from the shards' keys): no new run, not one page sent to a server again.
    served_by_b = _served(b)
    second = run_planner()
    assert second.is_completed(), str(second)
    again = asyncio.run(second.aresult())
    assert again["shard_runs"] == summary["shard_runs"]
    assert again["retries"] == 0
    assert _served(b) == served_by_b


def _committed(s3_client: Any, bucket: str, uris: list[str]) -> set[str]:
    listed = s3_client.list_objects_v2(Bucket=bucket, Prefix="out/results/").get("Contents", [])
    keys = {o["Key"] for o in listed}
    return {u for u in uris if f"out/results/{document_id(u)}.jsonl" in keys}
