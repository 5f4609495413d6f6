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
   the dead attempt had committed (pagegate.scale.runner, pagegate.scale.watch).
4. Report: one markdown artifact over all shards; the run fails with the failed shards
   and, read from the workspace, their PDFs that are not done.

Each node runs one worker and one vLLM server; the shard run finds its node's server
through PAGEGATE_SERVER_URL in the worker's environment (docs/cluster.md).
"""

# No `from __future__ import annotations`: Prefect builds the parameter model from these
# annotations, and a served run may see the function without its module's globals.
# Defaults are PlannerConfig's (pagegate/config.py), read by name.
import asyncio
from typing import Any

from prefect import State, flow, get_client, get_run_logger
from prefect.artifacts import acreate_markdown_artifact
from prefect.states import Completed, Failed

from pagegate.clock import WallClock
from pagegate.config import PlannerConfig
from pagegate.io.s3 import make_s3_client
from pagegate.output.workspace import Workspace
from pagegate.scale.failures import uncommitted_pdfs
from pagegate.scale.plan import plan_shards
from pagegate.scale.runner import run_shards
from pagegate.scale.summary import (
    FailedPdf,
    done_message,
    failure_message,
    planner_markdown,
    planner_summary,
)
from pagegate.tasks.output_options import record_shard_options
from pagegate.tasks.shard_runs import PrefectShardRuns


@flow(name="ocr-planner")
async def ocr_planner(
    sources: list[str],
    workspace: str,
    deployment: str = PlannerConfig.deployment,
    pages_per_shard: int = PlannerConfig.pages_per_shard,
    pdfs_per_shard: int = PlannerConfig.pdfs_per_shard,
    max_running_shards: int = PlannerConfig.max_running_shards,
    shard_parameters: dict[str, Any] | None = None,
    sample_size: int = PlannerConfig.sample_size,
    sample_lookahead: int = PlannerConfig.sample_lookahead,
    bytes_per_page: float | None = PlannerConfig.bytes_per_page,
    shard_retries: int = PlannerConfig.shard_retries,
    stale_after_seconds: float | None = PlannerConfig.stale_after_seconds,
    poll_seconds: float = PlannerConfig.poll_seconds,
    rerun_salt: str = PlannerConfig.rerun_salt,
    s3_retry_mode: str = PlannerConfig.s3_retry_mode,
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
    config = PlannerConfig(
        deployment=deployment, pages_per_shard=pages_per_shard, pdfs_per_shard=pdfs_per_shard,
        max_running_shards=max_running_shards, sample_size=sample_size,
        sample_lookahead=sample_lookahead, bytes_per_page=bytes_per_page,
        shard_retries=shard_retries, stale_after_seconds=stale_after_seconds,
        poll_seconds=poll_seconds, rerun_salt=rerun_salt, s3_retry_mode=s3_retry_mode,
    )
    logger = get_run_logger()
    clock = WallClock()  # epoch seconds: compared with Prefect's state and heartbeat times
    started = clock.now()
    s3_client = make_s3_client(retry_mode=config.s3_retry_mode)
    space = Workspace.open(workspace, s3_client=s3_client)
    plan = await asyncio.to_thread(
        plan_shards,
        sources,
        workspace=space.store,
        target_pages=config.pages_per_shard,
        target_pdfs=config.pdfs_per_shard,
        s3_client=s3_client,
        sample_size=config.sample_size,
        sample_lookahead=config.sample_lookahead,
        bytes_per_page=config.bytes_per_page,
    )
    planning_seconds = clock.now() - started
    # Before any shard starts: each shard lists only its manifest, so it would name its
    # markdown relative to its own files; the planner's root keeps one layout for all.
    await asyncio.to_thread(record_shard_options, space, plan.source_root, shard_parameters or {})
    logger.info(
        "planned %d shard(s): %d PDFs, ~%d pages (%.1f s)",
        len(plan.shards), plan.pdfs, plan.estimated_pages, planning_seconds,
    )
    async with get_client() as client:
        runs = PrefectShardRuns(
            client, deployment=config.deployment, workspace=space.uri,
            parameters=dict(shard_parameters or {}), salt=config.rerun_salt,
        )
        outcomes = await run_shards(plan.shards, runs, clock, config, started=started, logger=logger)
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
            elapsed_seconds=clock.now() - started, planning_seconds=planning_seconds,
        ),
        description="pagegate scale-out summary",
    )
    summary = planner_summary(plan, outcomes, failed_pdfs)
    if any(not o.ok for o in outcomes):
        message = failure_message(outcomes, failed_pdfs)
        logger.error(message)
        return Failed(message=message, data=summary)
    return Completed(message=done_message(plan, outcomes), data=summary)
