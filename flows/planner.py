"""The `ocr-planner` flow: cut a large job into shards and run them across the GPU nodes.

1. Plan (pagegate.scale.plan): stream the listing, estimate pages from object sizes
   with a model fitted on a small sample, cut shards whose boundaries and ids follow
   from their keys, write each shard's keys to a manifest in the workspace.
2. Launch: one run of the `shard` deployment (the `ocr-pdfs` flow, sources = the
   manifest) per shard on the `gpu` pool, at most `max_running_shards` at a time, each
   with an idempotency key made from its id, so a second planner over the same keys
   gets the same runs back instead of doubling the work.
3. Watch: look at every running shard each `poll_seconds`; a crashed shard, or one whose
   worker died (no heartbeat for `stale_after_seconds`), is retried like the UI's Retry:
   the same run goes back to the pool and finishes on another node, skipping the PDFs
   the dead attempt had committed (pagegate.scale.watch).
4. Report: one markdown artifact over all shards; the run fails with the failed shards
   and, read from the workspace, their PDFs that are not done.

Each node runs one worker and one vLLM server; the shard run finds its node's server
through PAGEGATE_SERVER_URL in the worker's environment (docs/cluster.md).
"""

# No `from __future__ import annotations`: Prefect builds the parameter model from these
# annotations, and a served run may see the function without its module's globals.
import asyncio
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any
from uuid import UUID

from prefect import State, flow, get_client, get_run_logger
from prefect.artifacts import acreate_markdown_artifact
from prefect.states import Completed, Failed

from pagegate.io.s3 import make_s3_client
from pagegate.output.workspace import Workspace
from pagegate.scale.failures import uncommitted_pdfs
from pagegate.scale.plan import PlannedShard, ScalePlan, plan_shards
from pagegate.scale.summary import FailedPdf, ShardOutcome, failure_message, planner_markdown
from pagegate.scale.watch import Verdict, judge, launch_slots
from tasks.shard_runs import force_retry, last_heartbeat, launch_shard, read_runs, run_view


@dataclass
class _Active:
    """A shard whose run is not final yet, and what this planner did to it."""

    shard: PlannedShard
    run_name: str
    retries: int = 0


@flow(name="ocr-planner")
async def ocr_planner(
    sources: list[str],
    workspace: str,
    deployment: str = "ocr-pdfs/shard",
    pages_per_shard: int = 20_000,
    pdfs_per_shard: int = 1_000,
    max_running_shards: int = 8,
    shard_parameters: dict[str, Any] | None = None,
    sample_size: int = 128,
    sample_lookahead: int = 10_000,
    bytes_per_page: float | None = None,
    shard_retries: int = 2,
    stale_after_seconds: float | None = 180.0,
    poll_seconds: float = 5.0,
    rerun_salt: str = "",
    s3_retry_mode: str = "standard",
) -> State[Any]:
    """Plan shards of SOURCES, run them on the GPU pool, report; fails if any shard fails.

    Args:
        sources: as for `ocr-pdfs` (s3://bucket/prefix, globs, folders, .txt lists).
        workspace: the shared workspace every shard commits into (and where manifests go).
        deployment: the deployment each shard runs as, "flow/deployment".
        pages_per_shard: target estimated pages per shard (about; at most twice).
        pdfs_per_shard: target PDFs per shard, whichever target is reached first.
        max_running_shards: shard runs not yet final at once (e.g. 2 per GPU node).
        shard_parameters: further `ocr-pdfs` parameters for every shard, e.g.
            {"pages_per_group": 200, "result_storage": "s3://bucket/prefect-results"}.
        sample_size: PDFs whose page counts fit pages-per-byte (a few 64 KiB range
            reads each; 0: the default ratio).
        sample_lookahead: the sample is drawn from this many first listed PDFs.
        bytes_per_page: known bytes per page: no sampling.
        shard_retries: retries of a crashed or dead shard run (and once, of a shard
            that had already failed before this planner started).
        stale_after_seconds: a running shard without a flow-run heartbeat for this long
            is dead (workers need PREFECT_FLOWS_HEARTBEAT_FREQUENCY, e.g. 30); empty: never.
        poll_seconds: how often the shard runs are looked at.
        rerun_salt: change it (e.g. to a date) to run identical shards again as new runs.
        s3_retry_mode: botocore retry mode for S3.
    """
    logger = get_run_logger()
    started = time.time()
    s3_client = make_s3_client(retry_mode=s3_retry_mode)
    space = Workspace.open(workspace, s3_client=s3_client)
    plan = await asyncio.to_thread(
        plan_shards,
        sources,
        workspace=space.store,
        target_pages=pages_per_shard,
        target_pdfs=pdfs_per_shard,
        s3_client=s3_client,
        sample_size=sample_size,
        sample_lookahead=sample_lookahead,
        bytes_per_page=bytes_per_page,
    )
    planning_seconds = time.time() - started
    logger.info(
        "planned %d shard(s): %d PDFs, ~%d pages (%.1f s)",
        len(plan.shards), plan.pdfs, plan.estimated_pages, planning_seconds,
    )
    outcomes = await _run_shards(
        plan,
        deployment=deployment,
        workspace=space.uri,
        parameters=dict(shard_parameters or {}),
        salt=rerun_salt,
        max_running=max(1, max_running_shards),
        retries=shard_retries,
        stale_after=stale_after_seconds,
        poll_seconds=poll_seconds,
        started=started,
    )
    failed_pdfs: dict[str, list[FailedPdf]] = {}
    for outcome in outcomes:
        if not outcome.ok:
            failed_pdfs[outcome.shard.id] = await asyncio.to_thread(
                uncommitted_pdfs, space, outcome.shard.manifest, s3_client=s3_client
            )
    await acreate_markdown_artifact(
        key="ocr-planner-summary",
        markdown=planner_markdown(
            plan, outcomes, failed_pdfs,
            elapsed_seconds=time.time() - started, planning_seconds=planning_seconds,
        ),
        description="pagegate scale-out summary",
    )
    summary = _summary(plan, outcomes, failed_pdfs)
    if any(not o.ok for o in outcomes):
        message = failure_message(outcomes, failed_pdfs)
        logger.error(message)
        return Failed(message=message, data=summary)
    return Completed(
        message=f"{len(outcomes)} shard(s) done: {plan.pdfs} PDFs, ~{plan.estimated_pages} pages",
        data=summary,
    )


async def _run_shards(
    plan: ScalePlan,
    *,
    deployment: str,
    workspace: str,
    parameters: dict[str, Any],
    salt: str,
    max_running: int,
    retries: int,
    stale_after: float | None,
    poll_seconds: float,
    started: float,
) -> list[ShardOutcome]:
    """Launch shards a bounded number at a time, watch them all, retry the dead ones."""
    logger = get_run_logger()
    waiting = deque(plan.shards)
    active: dict[UUID, _Active] = {}
    outcomes: list[ShardOutcome] = []
    window = max(120.0, 2 * (stale_after or 0))
    async with get_client() as client:
        while waiting or active:
            for _ in range(launch_slots(len(active), len(waiting), max_running)):
                shard = waiting.popleft()
                launched = await launch_shard(
                    deployment, shard, workspace=workspace, parameters=parameters, salt=salt
                )
                active[launched.id] = _Active(shard, launched.name)
            runs = await read_runs(client, list(active))
            now = time.time()
            for run_id, entry in list(active.items()):
                run = runs.get(run_id)
                if run is None:
                    continue
                beat = None
                if stale_after and run.state is not None and run.state.is_running():
                    beat = await last_heartbeat(client, run_id, window)
                view = run_view(run, beat, planner_started=started)
                if entry.retries:  # a run this planner retried is judged as its own
                    view = replace(view, preexisting=False)
                verdict = judge(view, now=now, stale_after=stale_after,
                                retries_left=retries - entry.retries)
                if verdict is Verdict.WAIT:
                    continue
                if verdict is Verdict.RETRY:
                    reason = f"pagegate planner: shard run was {view.state_type.lower()}"
                    if view.state_type in ("RUNNING", "PENDING"):
                        reason += f", no sign of life for {stale_after:.0f} s"
                    logger.warning("retrying shard %s (%s): %s", entry.shard.id, run.name, reason)
                    await force_retry(client, run_id, reason)
                    entry.retries += 1
                    continue
                del active[run_id]
                message = (run.state.message or "") if run.state is not None else ""
                outcomes.append(ShardOutcome(
                    entry.shard, verdict.value, str(run_id), run.name, entry.retries, message
                ))
                logger.info("shard %s %s: %s", entry.shard.id, verdict.value, message)
            if active or waiting:
                await asyncio.sleep(poll_seconds)  # the next look at the shard runs
    return outcomes


def _summary(
    plan: ScalePlan, outcomes: list[ShardOutcome], failed: dict[str, list[FailedPdf]]
) -> dict[str, Any]:
    return {
        "shards": len(plan.shards),
        "pdfs": plan.pdfs,
        "estimated_pages": plan.estimated_pages,
        "completed": sum(o.ok for o in outcomes),
        "retries": sum(o.retries for o in outcomes),
        "shard_runs": {o.shard.id: o.flow_run_id for o in outcomes},
        "failed_shards": [
            {"shard": o.shard.id, "outcome": o.verdict, "flow_run": o.flow_run_name,
             "pdfs": [{"source": p.uri, "reason": p.reason} for p in failed.get(o.shard.id, ())]}
            for o in outcomes if not o.ok
        ],
    }
