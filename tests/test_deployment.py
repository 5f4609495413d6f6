"""prefect.yaml end to end: deploy, a worker on the `gpu` pool, a run, a retry through the API.

Everything is real and out of process: the session's Prefect API, `prefect work-pool
create`, `prefect deploy --all`, `prefect worker start --pool gpu`, the run triggered
with `prefect deployment run 'ocr-pdfs/nightly' --param ...` (the form the README
documents), the simulator, and moto's S3 server for sources and workspace. The worker's
flow-run subprocess inherits the test's AWS_* variables, as a production worker would.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any
from uuid import UUID

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pagegate import samples
from tests.helpers import prefect_cli, prefect_env
from tests.prefect_runs import log_tail, stop_process, wait_final

# Three prefect CLI calls in its fixture (120 s each at most) and two runs of
# 120 s at most add up past pytest's 300 s: the outer limit covers the sum, so theirs
# are the ones that report.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api"), pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 120.0


@pytest.fixture
def worker(tmp_path: Path, s3_env: str) -> Iterator[tuple[dict[str, str], IO[bytes]]]:
    """The pool, the deployments and a worker process; the worker is stopped at teardown."""
    env = prefect_env(tmp_path / "prefect-home")
    prefect_cli(env, "work-pool", "create", "gpu", "--type", "process", "--overwrite")
    # shard-k8s's pool, with its template (its Job: tests/test_kubernetes.py)
    prefect_cli(env, "work-pool", "create", "gpu-k8s", "--type", "kubernetes", "--overwrite",
                "--base-job-template", str(REPO / "pagegate" / "deploy" / "kubernetes-gpu.json"))
    out = prefect_cli(env, "deploy", "--all")
    for name in ("ocr-pdfs/nightly", "ocr-pdfs/shard", "ocr-pdfs/shard-k8s", "reprocess"):
        assert name in out, out
    # nightly's cron schedule is active in prefect.yaml. Pause it in this shared test
    # server (which also deletes the runs already scheduled from it), so that a suite
    # running across 02:00 UTC never has a real nightly run picked up by another test's
    # `gpu` worker.
    out = prefect_cli(env, "deployment", "schedule", "pause", "--all")
    assert "nightly" in out, out
    with tempfile.TemporaryFile() as log:  # a file, never a pipe the worker could fill up
        proc = subprocess.Popen(
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", "gpu", "--name", "gpu-test"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            yield env, log
        finally:
            stop_process(proc)


async def force_retry(flow_run_id: str) -> None:
    """What the UI's Retry button does: force the failed run to AwaitingRetry."""
    from prefect.client.orchestration import get_client
    from prefect.states import AwaitingRetry

    async with get_client() as client:
        result: Any = await client.set_flow_run_state(flow_run_id, AwaitingRetry(), force=True)
        assert result.state is not None and result.state.name == "AwaitingRetry"


async def run_artifacts(flow_run_id: str) -> dict[str, Any]:
    """The newest artifact of each key created by the flow run."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
    from prefect.client.schemas.sorting import ArtifactSort

    async with get_client() as client:
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(str(flow_run_id))])
            ),
            sort=ArtifactSort.CREATED_DESC,
        )
    newest: dict[str, Any] = {}
    for artifact in artifacts:
        if artifact.key is not None:  # keyless artifacts have no "newest of a key"
            newest.setdefault(artifact.key, artifact)
    return newest


def requests_served(metrics_url: str) -> float:
    text = httpx.get(metrics_url, timeout=10).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "vllm:request_success_total"
    )


def test_nightly_deployment_runs_on_a_worker_and_a_retry_redoes_only_the_failed_pdf(
    worker: tuple[dict[str, str], IO[bytes]], s3_bucket: str, s3_client: Any, start_sim: Any
) -> None:
    env, log = worker
    for i in range(3):
        s3_client.put_object(
            Bucket=s3_bucket, Key=f"incoming/d{i}.pdf", Body=samples.text_pdf(2, title=f"D{i}", seed=i)
        )
    # Not a PDF yet: it fails with not_a_pdf; the operator fixes the upload, then retries.
    s3_client.put_object(Bucket=s3_bucket, Key="incoming/late.pdf", Body=b"upload in progress")
    sim = start_sim(profile="ci")
    workspace = f"s3://{s3_bucket}/ocr-out"

    out = prefect_cli(
        env, "deployment", "run", "ocr-pdfs/nightly",
        "--param", f'sources=["s3://{s3_bucket}/incoming/"]',
        "--param", f"workspace={workspace}",
        "--param", f"server_url={sim.base_url}",
    )
    match = re.search(r"UUID: ([0-9a-f-]{36})", out)
    assert match, out
    flow_run_id = match.group(1)

    first = asyncio.run(wait_final(flow_run_id, log, timeout_s=RUN_TIMEOUT_S))

    assert first.state.is_failed(), f"{first.state}\n{log_tail(log)}"
    assert "late.pdf" in (first.state.message or "")
    assert first.deployment_id is not None
    listed = s3_client.list_objects_v2(Bucket=s3_bucket, Prefix="ocr-out/")["Contents"]
    keys = {o["Key"] for o in listed}
    assert sum(k.startswith("ocr-out/results/") for k in keys) == 3
    assert sum(k.startswith("ocr-out/ledger/") for k in keys) == 1
    served_before = requests_served(sim.metrics_url)
    assert served_before == 3 * 2

    # The operator's view of the run: progress at 100 %, the summary, its chart, the failures.
    artifacts = asyncio.run(run_artifacts(flow_run_id))
    progress = artifacts["ocr-progress"]
    assert float(progress.data) == 100.0
    # settled: every planned page (3 x 2 + late.pdf's 1); converted: the 6 of the 3 good PDFs
    assert progress.description.startswith("6/7 pages converted (86%)")
    summary = artifacts["ocr-run-summary"].data
    assert "| pages | 6 |" in summary and "| gate releases / pauses |" in summary
    chart_uri = f"s3://{s3_bucket}/ocr-out/runs/{flow_run_id}/chart.png"
    assert chart_uri in summary
    link = re.search(r"\]\((http[^)]+)\)", summary)
    assert link, summary
    assert httpx.get(link.group(1), timeout=10).content[:8] == b"\x89PNG\r\n\x1a\n"
    failed = artifacts["ocr-failed-pdfs"].data
    assert "late.pdf" in failed and "not_a_pdf" in failed

    s3_client.put_object(
        Bucket=s3_bucket, Key="incoming/late.pdf", Body=samples.text_pdf(3, title="Late")
    )
    asyncio.run(force_retry(flow_run_id))
    second = asyncio.run(wait_final(flow_run_id, log, timeout_s=RUN_TIMEOUT_S, runs=2))

    assert second.state.is_completed(), f"{second.state}\n{log_tail(log)}"
    assert second.id == first.id and second.run_count == 2
    # only the 3 pages of the PDF that had failed went to the server again
    assert requests_served(sim.metrics_url) - served_before == 3
    listed = s3_client.list_objects_v2(Bucket=s3_bucket, Prefix="ocr-out/")["Contents"]
    keys = {o["Key"] for o in listed}
    assert sum(k.startswith("ocr-out/results/") for k in keys) == 4
    assert not any(k.startswith("ocr-out/ledger/") for k in keys)


def test_a_deployment_run_whose_preflight_fails_ends_failed_with_the_cli_line(
    worker: tuple[dict[str, str], IO[bytes]], tmp_path: Path, start_sim: Any
) -> None:
    """No CLI in front of it: the flow's own preflight stops the run before any page."""
    env, log = worker
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.pdf").write_bytes(samples.text_pdf(1, title="A"))
    sim = start_sim(profile="ci")
    args = [f"{src}", f"{tmp_path / 'ws'}", sim.base_url, "olmocrx"]

    out = prefect_cli(
        env, "deployment", "run", "ocr-pdfs/nightly",
        "--param", f'sources=["{args[0]}"]', "--param", f"workspace={args[1]}",
        "--param", f"server_url={args[2]}", "--param", f"model={args[3]}",
    )
    match = re.search(r"UUID: ([0-9a-f-]{36})", out)
    assert match, out
    run = asyncio.run(wait_final(match.group(1), log, timeout_s=RUN_TIMEOUT_S))
    cli = subprocess.run(
        [sys.executable, "-m", "pagegate.cli", "run", args[0], "--workspace", args[1],
         "--server", args[2], "--model", args[3]],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )

    assert run.state.is_failed(), f"{run.state}\n{log_tail(log)}"
    assert run.deployment_id is not None
    assert run.state.message == (
        f"model 'olmocrx' is not served by {sim.base_url}; it serves olmocr: pass --model olmocr"
    )
    assert cli.returncode == 2
    assert cli.stderr.strip().splitlines()[-1] == f"error: {run.state.message}"
    assert requests_served(sim.metrics_url) == 0
    assert not (tmp_path / "ws" / "results").exists()
