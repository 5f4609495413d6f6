"""Prefect tasks for planning and for one group: thin wrappers over pagegate modules."""

from __future__ import annotations

import asyncio

from prefect import task

from pagegate.group_job import process_group
from pagegate.outcomes import GroupOutcome
from pagegate.plan_job import plan_sources
from pagegate.planning import Group
from pagegate.storage import make_s3_client
from tasks.run_context_var import current_run_context


@task(name="plan-groups")
async def plan_groups_task(
    sources: list[str], pages_per_group: int, pdf_password: str | None = None
) -> list[Group]:
    """List the sources, count pages, cut groups (blocking I/O, so off the loop)."""
    return await asyncio.to_thread(
        plan_sources,
        sources,
        pages_per_group=pages_per_group,
        s3_client=make_s3_client(),
        password=pdf_password,
    )


@task(name="ocr-group", task_run_name="ocr-group-{group.id}")
async def ocr_group(group: Group) -> GroupOutcome:
    """OCR every PDF of one group through the run's shared admission gate."""
    return await process_group(current_run_context(), group)
