"""UI Retry, the way the UI does it: a deployment run, forced to AwaitingRetry, picked up again.

`ocr_pdfs.serve()` runs in its own process (the deployment and its runner), the run is
created from the deployment, and the retry is the API call behind the UI's Retry button
(Prefect's ui-v2 source: `set_flow_run_state` to SCHEDULED/AwaitingRetry, force=true).
Sources, workspace and the persisted task results all live on moto's S3 server; pages go
to the simulator, whose request counter shows exactly what the retry re-did.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

import pytest

from pagegate import samples
from pagegate.plan.groups import PlannedPdf, plan_groups
from tests.helpers import metric_total
from tests.prefect_runs import log_tail, stop_process, wait_final, wait_task_runs_final

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]

REPO = Path(__file__).resolve().parents[1]
DEPLOYMENT = "exactly-once"
TIMEOUT_S = 90.0


@pytest.fixture
def served(s3_env: str, tmp_path: Path) -> Iterator[IO[bytes]]:
    """`ocr_pdfs.serve()` in a child process, polling the API every second."""
    from prefect.settings import PREFECT_API_URL

    env = {
        **os.environ,
        "PREFECT_API_URL": str(PREFECT_API_URL.value()),
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_RUNNER_POLL_FREQUENCY": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    log = tempfile.TemporaryFile()  # noqa: SIM115 (a file, never a pipe the runner could fill up)
    code = f"from pagegate.flows.ocr_pdfs import ocr_pdfs; ocr_pdfs.serve(name={DEPLOYMENT!r})"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        yield log
    finally:
        stop_process(proc)
        log.close()


async def _deployment_id(log: IO[bytes]) -> Any:
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + TIMEOUT_S
    async with get_client() as client:
        while time.monotonic() < deadline:
            try:
                return (await client.read_deployment_by_name(f"ocr-pdfs/{DEPLOYMENT}")).id
            except Exception:  # not registered yet: polling for the runner's start-up
                await asyncio.sleep(0.5)
    raise AssertionError(f"deployment never registered:\n{log_tail(log)}")


async def _task_states(flow_run_id: Any) -> list[tuple[str, str]]:
    """(task name, state name) of every task run of the flow run, across attempts,
    oldest first (task run names carry random suffixes, so name order means nothing).

    Waits until both attempts' task runs (six groups, two plans) are recorded and final:
    the server writes task-run states from events in the background, after the flow run
    itself may already read final."""
    runs = await wait_task_runs_final(
        flow_run_id, {"ocr-group-": 6, "plan-pending": 2}, timeout_s=TIMEOUT_S
    )
    return [(r.name, r.state.name if r.state else "") for r in runs]


async def _failed_table(flow_run_id: Any) -> list[dict[str, str]]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with get_client() as client:
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    tables = [a for a in artifacts if a.key == "ocr-failed-pdfs"]
    assert tables, [a.key for a in artifacts]
    data = tables[0].data
    rows = cast(list[dict[str, str]], json.loads(data) if isinstance(data, str) else data)
    return rows


def test_ui_retry_redoes_only_the_failed_group_and_only_its_unfinished_pdf(
    served: IO[bytes], s3_bucket: str, s3_client: Any, start_sim: Any
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.states import AwaitingRetry

    pages = {"a": 2, "b": 2, "c": 2, "d": 2, "e": 2, "f": 2}
    for name, count in pages.items():
        body = samples.text_pdf(count, title=name.upper(), seed=ord(name))
        if name == "d":
            body = samples.truncated_pdf()  # an upload cut short: unreadable this time
        s3_client.put_object(Bucket=s3_bucket, Key=f"in/{name}.pdf", Body=body)
    source = f"s3://{s3_bucket}/in/"
    # d counts as one page at planning (it cannot be opened): groups {a,b} {c,d} {e,f}.
    expected = plan_groups(
        [PlannedPdf(f"{source}{n}.pdf", None if n == "d" else 2) for n in pages], 4
    )
    assert [len(g) for g in expected] == [2, 2, 2]
    sim = start_sim(profile="ci")
    params = {
        "sources": [source],
        "workspace": f"s3://{s3_bucket}/out",
        "server_url": sim.base_url,
        "pages_per_group": 4,
        "result_storage": f"s3://{s3_bucket}/prefect-results",
    }

    async def scenario() -> tuple[Any, Any, float, float]:
        await _deployment_id(served)
        started: Any = run_deployment(f"ocr-pdfs/{DEPLOYMENT}", parameters=params, timeout=0)
        first = await started  # a coroutine here; Prefect's sync/async dual typing hides it
        run1 = await wait_final(first.id, served, timeout_s=TIMEOUT_S, runs=1)
        requests_first = metric_total(sim.metrics_url, "vllm:request_success_total")
        # The operator re-uploads d.pdf whole (3 pages now), then presses Retry.
        s3_client.put_object(Bucket=s3_bucket, Key="in/d.pdf", Body=samples.text_pdf(3, title="D"))
        async with get_client() as client:
            forced: Any = await client.set_flow_run_state(first.id, AwaitingRetry(), force=True)
        assert forced.state is not None and forced.state.name == "AwaitingRetry"
        run2 = await wait_final(first.id, served, timeout_s=TIMEOUT_S, runs=2)
        requests_total = metric_total(sim.metrics_url, "vllm:request_success_total")
        return run1, run2, requests_first, requests_total - requests_first

    run1, run2, requests_first, requests_retry = asyncio.run(scenario())

    assert run1.state.is_failed(), run1.state
    assert "d.pdf" in (run1.state.message or "")
    table = asyncio.run(_failed_table(run1.id))
    assert [(r["source"], r["reason"]) for r in table] == [(f"{source}d.pdf", "unreadable")]
    assert requests_first == 10  # five readable 2-page PDFs
    assert run2.state.is_completed(), run2.state
    assert run2.run_count == 2 and run2.id == run1.id
    # The retry: plan and two groups from the cache; in group {c,d} c is skipped
    # (committed) and only d's three pages go to the server.
    assert requests_retry == 3
    states = asyncio.run(_task_states(run1.id))
    group_states = [s for n, s in states if n.startswith("ocr-group-")]
    assert sorted(group_states) == sorted(["Completed", "Completed", "Failed", "Cached", "Cached", "Completed"])
    # plan-pending ran in the first attempt and came from the cache in the retry.
    assert [s for n, s in states if n.startswith("plan-pending")] == ["Completed", "Cached"]
    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=s3_bucket, Prefix="out/")["Contents"]]
    results = [k for k in keys if k.startswith("out/results/")]
    assert len(results) == 6
    assert not [k for k in keys if k.startswith("out/ledger/")]
    stored = s3_client.list_objects_v2(Bucket=s3_bucket, Prefix="prefect-results/")
    assert stored.get("KeyCount", 0) > 0, "task results persisted to S3"
    print(f"UI retry: PDFs in 6, results 6, duplicates 0, ledger 0 after retry; "
          f"page requests first run {requests_first:.0f}, retry {requests_retry:.0f}")
