"""Prefect tasks for planning and for one group: thin wrappers over pagegate modules.

Both persist their results under keys that survive a retry of the same flow run
(tasks.cache_keys): on a UI Retry the plan and every finished group come back
`Cached`, and only the groups that had a failed PDF run again. A group with a failed
PDF therefore ends `Failed` (its outcome rides along as the state's data, so the flow
can still count it): a failed state is never written under the cache key.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from prefect import State, task
from prefect.context import TaskRunContext
from prefect.states import Failed
from pydantic import SecretStr

from pagegate.io.s3 import make_s3_client
from pagegate.ocr.job import process_group
from pagegate.ocr.outcomes import GroupOutcome, PdfOutcome
from pagegate.output.workspace import Workspace
from pagegate.plan.groups import Group
from pagegate.plan.pending import PendingPlan, plan_pending, plan_uris
from tasks.cache_keys import group_cache_key, plan_cache_key
from tasks.run_context_var import current_run_context


def _flow_run_id(context: TaskRunContext) -> str | None:
    run_id = context.task_run.flow_run_id
    return str(run_id) if run_id is not None else None


def _plan_key(context: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    run_id = _flow_run_id(context)
    if run_id is None:
        return None
    sources = list(parameters.get("sources") or parameters.get("uris") or [])
    return plan_cache_key(run_id, sources, int(parameters["pages_per_group"]))


def _group_key(context: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    run_id = _flow_run_id(context)
    return group_cache_key(run_id, parameters["group"].id) if run_id is not None else None


def _secret(password: SecretStr | None) -> str | None:
    return password.get_secret_value() if password is not None else None


@task(name="plan-pending", persist_result=True, cache_key_fn=_plan_key)
async def plan_pending_task(
    sources: list[str],
    pages_per_group: int,
    workspace: str,
    pdf_password: SecretStr | None = None,
    s3_retry_mode: str = "standard",
) -> PendingPlan:
    """List the sources, leave out PDFs already committed in `workspace`, cut groups."""
    s3_client = make_s3_client(retry_mode=s3_retry_mode)
    return await asyncio.to_thread(
        plan_pending,
        sources,
        workspace=Workspace.open(workspace, s3_client=s3_client),
        pages_per_group=pages_per_group,
        s3_client=s3_client,
        password=_secret(pdf_password),
    )


@task(name="plan-reprocess", persist_result=True, cache_key_fn=_plan_key)
async def plan_uris_task(
    uris: list[str],
    pages_per_group: int,
    pdf_password: SecretStr | None = None,
    s3_retry_mode: str = "standard",
) -> PendingPlan:
    """Groups over exactly these PDFs (reprocess): count pages, cut groups."""
    return await asyncio.to_thread(
        plan_uris,
        uris,
        pages_per_group=pages_per_group,
        s3_client=make_s3_client(retry_mode=s3_retry_mode),
        password=_secret(pdf_password),
    )


@dataclass(frozen=True)
class FailedGroup:
    """The outcome of a group with failed PDFs, carried as its Failed state's data.

    Its repr is short because Prefect logs a failed state with its data.
    """

    outcome: GroupOutcome

    def __repr__(self) -> str:
        failed = len(self.outcome.failed)
        return f"FailedGroup({self.outcome.group_id}: {failed} of {len(self.outcome.pdfs)} PDFs failed)"


@task(
    name="ocr-group",
    task_run_name="ocr-group-{group.id}",
    persist_result=True,
    cache_key_fn=_group_key,
)
async def ocr_group(group: Group) -> GroupOutcome | State[Any]:
    """OCR every PDF of one group through the run's shared admission gate."""
    outcome = await process_group(current_run_context(), group)
    if outcome.failed:
        names = ", ".join(p.uri for p in outcome.failed[:5])
        more = f" (+{len(outcome.failed) - 5} more)" if len(outcome.failed) > 5 else ""
        return Failed(
            message=f"{len(outcome.failed)} of {len(outcome.pdfs)} PDF(s) failed: {names}{more}",
            data=FailedGroup(outcome),
        )
    return outcome


async def group_outcome(state: State[Any], group: Group) -> GroupOutcome:
    """The outcome in a group task's final state, whether it completed, came from the
    cache, failed with PDFs recorded, or crashed (then every PDF counts as failed)."""
    data = await state.aresult(raise_on_failure=False)
    if isinstance(data, FailedGroup):
        return data.outcome
    if isinstance(data, GroupOutcome):
        return data
    detail = f"group task ended {state.type.value}: {state.message or data!r}"[:500]
    return crashed_group(group, detail)


def crashed_group(group: Group, detail: str) -> GroupOutcome:
    """Every PDF of a group whose task ended without an outcome, as `internal_error`."""
    pdfs = tuple(
        PdfOutcome(uri=uri, status="failed", reason="internal_error", detail=detail)
        for uri in group.uris
    )
    return GroupOutcome(group_id=group.id, pdfs=pdfs)
