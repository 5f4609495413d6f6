"""The task that picks a reprocess run's PDFs from the workspace ledger.

Persisted under a key tied to the flow run, like the plan: a retried reprocess run
works through the same list as its first attempt, although the ledger has changed
since (every PDF that succeeded took its record with it).
"""

from __future__ import annotations

import asyncio
from typing import Any

from prefect import task
from prefect.context import TaskRunContext

from pagegate.config import RunConfig
from pagegate.io.s3 import S3Credentials, make_s3_client
from pagegate.output.workspace import Workspace
from pagegate.plan.reprocess import select_for_reprocess
from pagegate.tasks.aws_credentials import load_s3_credentials
from pagegate.tasks.cache_keys import plan_cache_key


def _selection_key(context: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    run_id = context.task_run.flow_run_id
    if run_id is None:
        return None
    reasons = sorted(parameters.get("only_reasons") or [])
    return "select-" + plan_cache_key(str(run_id), [parameters["workspace"], *reasons], 0)


def select_from_ledger(
    workspace: str,
    only_reasons: list[str] | None,
    *,
    s3_retry_mode: str = RunConfig.s3_retry_mode,
    s3_credentials: S3Credentials | None = None,
) -> list[str]:
    """The sources of the workspace's ledger records to redo (pagegate.plan.reprocess)."""
    client = make_s3_client(retry_mode=s3_retry_mode, credentials=s3_credentials)
    ws = Workspace.open(workspace, s3_client=client)
    return select_for_reprocess(
        ws.iter_failures(), only_reasons=only_reasons, is_committed=ws.is_committed
    )


@task(name="select-from-ledger", persist_result=True, cache_key_fn=_selection_key)
async def select_from_ledger_task(
    workspace: str,
    only_reasons: list[str] | None = None,
    s3_retry_mode: str = RunConfig.s3_retry_mode,
    aws_credentials: str | None = None,
) -> list[str]:
    credentials = await load_s3_credentials(aws_credentials)
    return await asyncio.to_thread(
        select_from_ledger, workspace, only_reasons, s3_retry_mode=s3_retry_mode,
        s3_credentials=credentials,
    )
