"""The planning tasks: cut a run's sources (or a reprocess run's PDFs) into groups.

Persisted under a key tied to the flow run (pagegate.tasks.cache_keys): on a UI Retry the plan
comes back `Cached`, so the retry works through the groups of the first attempt.
"""

from __future__ import annotations

import asyncio
from typing import Any

from prefect import task
from prefect.context import TaskRunContext
from pydantic import SecretStr

from pagegate.config import RunConfig
from pagegate.io.s3 import LazyS3Client
from pagegate.output.workspace import Workspace
from pagegate.plan.pending import PendingPlan, plan_pending, plan_uris
from pagegate.tasks.aws_credentials import load_s3_credentials
from pagegate.tasks.cache_keys import plan_cache_key


def _plan_key(context: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    run_id = context.task_run.flow_run_id
    if run_id is None:
        return None
    sources = list(parameters.get("sources") or parameters.get("uris") or [])
    return plan_cache_key(str(run_id), sources, int(parameters["pages_per_group"]))


def _secret(password: SecretStr | None) -> str | None:
    return password.get_secret_value() if password is not None else None


@task(name="plan-pending", persist_result=True, cache_key_fn=_plan_key)
async def plan_pending_task(
    sources: list[str],
    pages_per_group: int,
    workspace: str,
    pdf_password: SecretStr | None = None,
    s3_retry_mode: str = RunConfig.s3_retry_mode,
    aws_credentials: str | None = None,
    shared_as: str = "",
) -> PendingPlan:
    """List the sources, leave out PDFs already committed in `workspace`, and take their
    groups from the workspace's shared plan, adding the PDFs it lacks (as `shared_as`).

    `aws_credentials` names a prefect-aws block (tasks/aws_credentials.py): the name is
    the parameter, so the secret itself is never a task input.
    """
    s3_client = LazyS3Client(
        retry_mode=s3_retry_mode, credentials=await load_s3_credentials(aws_credentials)
    )
    return await asyncio.to_thread(
        plan_pending,
        sources,
        workspace=Workspace.open(workspace, s3_client=s3_client),
        pages_per_group=pages_per_group,
        s3_client=s3_client,
        password=_secret(pdf_password),
        shared_as=shared_as,
    )


@task(name="plan-reprocess", persist_result=True, cache_key_fn=_plan_key)
async def plan_uris_task(
    uris: list[str],
    pages_per_group: int,
    pdf_password: SecretStr | None = None,
    s3_retry_mode: str = RunConfig.s3_retry_mode,
    aws_credentials: str | None = None,
) -> PendingPlan:
    """Groups over exactly these PDFs (reprocess): count pages, cut groups."""
    s3_client = LazyS3Client(
        retry_mode=s3_retry_mode, credentials=await load_s3_credentials(aws_credentials)
    )
    return await asyncio.to_thread(
        plan_uris,
        uris,
        pages_per_group=pages_per_group,
        s3_client=s3_client,
        password=_secret(pdf_password),
    )
