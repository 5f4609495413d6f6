"""The task that OCRs one group, and how the flow reads its final state.

Its result persists under a key that survives a retry of the same flow run
(pagegate.tasks.cache_keys): on a UI Retry every finished group comes back `Cached`, and only
the groups that had a failed PDF run again. A group with a failed PDF therefore ends
`Failed` (its outcome rides along as the state's data, so the flow can still count
it): a failed state is never written under the cache key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefect import State, task
from prefect.context import TaskRunContext
from prefect.states import Failed

from pagegate.ocr.job import process_group
from pagegate.ocr.outcomes import GroupOutcome, PdfOutcome
from pagegate.plan.groups import Group
from pagegate.report.summary import named
from pagegate.tasks.cache_keys import group_cache_key
from pagegate.tasks.run_context_var import current_run_context
from pagegate.tasks.task_log import quiet_returned_failures


def _group_key(context: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    run_id = context.task_run.flow_run_id
    return group_cache_key(str(run_id), parameters["group"].id) if run_id is not None else None


@dataclass(frozen=True)
class FailedGroup:
    """The outcome of a group with failed PDFs, carried as its Failed state's data.

    Its repr is short because Prefect logs a failed state with its data.
    """

    outcome: GroupOutcome

    def __repr__(self) -> str:
        failed = len(self.outcome.failed)
        return f"FailedGroup({self.outcome.group_id}: {failed} of {self.outcome.count} PDFs failed)"


@task(
    name="ocr-group",
    task_run_name="ocr-group-{group.id}",
    persist_result=True,
    cache_key_fn=_group_key,
)
async def ocr_group(group: Group) -> GroupOutcome | State[Any]:
    """OCR every PDF of one group through the run's shared admission gate; the outcome
    names only its failed and flagged PDFs (the rest are a tally, pagegate.ocr.outcomes)."""
    outcome = (await process_group(current_run_context(), group)).compact()
    if outcome.stopped:  # not cached: a Retry, once the workspace takes writes, redoes them
        quiet_returned_failures()
        return Failed(message=f"{outcome.stopped} of {outcome.count} PDF(s) not done: the "
                      "workspace stopped taking writes", data=FailedGroup(outcome))
    if outcome.failed:
        quiet_returned_failures()  # no bare "NoneType: None" under Prefect's line (tasks/task_log.py)
        names = named([p.uri for p in outcome.failed], shown=5)
        return Failed(
            message=f"{len(outcome.failed)} of {outcome.count} PDF(s) failed: {names}",
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
