"""The planner's report: its result, one markdown summary over all shards, its messages.

Pure: the planner gathers the outcomes (pagegate.scale.runner) and the failed PDFs of
each failed shard from the workspace (its ledger and commits); this module only formats.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pagegate.scale.plan import PlannedShard, ScalePlan


@dataclass(frozen=True)
class ShardOutcome:
    """How one shard ended for this planner run."""

    shard: PlannedShard
    verdict: str  # completed, failed, cancelled, lost (crashed or dead, retries spent)
    flow_run_id: str | None = None
    flow_run_name: str | None = None
    retries: int = 0
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict == "completed"


@dataclass(frozen=True)
class FailedPdf:
    """A PDF of a failed shard that is not committed, with its ledger reason if any."""

    uri: str
    reason: str


def failure_message(
    outcomes: Sequence[ShardOutcome], failed_pdfs: Mapping[str, Sequence[FailedPdf]], limit: int = 20
) -> str:
    """'2 of 9 shard(s) failed: s1.. (failed), s2.. (lost); 3 PDF(s) not done: a (reason), ...'"""
    bad = [o for o in outcomes if not o.ok]
    shards = ", ".join(f"{o.shard.id} ({o.verdict})" for o in bad[:limit])
    pdfs = [p for o in bad for p in failed_pdfs.get(o.shard.id, ())]
    names = ", ".join(f"{p.uri} ({p.reason})" for p in pdfs[:limit])
    more = f" (+{len(pdfs) - limit} more)" if len(pdfs) > limit else ""
    return (
        f"{len(bad)} of {len(outcomes)} shard(s) failed: {shards}; "
        f"{len(pdfs)} PDF(s) not done: {names}{more}"
    )


def planner_markdown(
    plan: ScalePlan,
    outcomes: Sequence[ShardOutcome],
    failed_pdfs: Mapping[str, Sequence[FailedPdf]],
    *,
    elapsed_seconds: float,
    planning_seconds: float,
) -> str:
    """The planner's markdown artifact: the plan, the estimate's quality, every shard."""
    done = sum(o.ok for o in outcomes)
    retried = sum(o.retries for o in outcomes)
    model = plan.model
    lines = [
        "# pagegate scale-out summary",
        "",
        "| | |",
        "|---|---|",
        f"| shards | {len(plan.shards)} ({done} completed, {len(outcomes) - done} not) |",
        f"| PDFs listed | {plan.pdfs} |",
        f"| estimated pages | {plan.estimated_pages} |",
        f"| bytes per page (fit) | {_bytes_per_page(model.pages_per_byte)} "
        f"from {model.sample_pdfs} sampled PDF(s) |",
        f"| estimate error (leave-one-out) | {_error(plan)} |",
        f"| shard retries | {retried} |",
        f"| planning / total time | {planning_seconds:.1f} s / {elapsed_seconds:.1f} s |",
        "",
        "| shard | PDFs | est. pages | outcome | retries | flow run |",
        "|---|---|---|---|---|---|",
    ]
    for o in sorted(outcomes, key=lambda o: o.shard.index):
        lines.append(
            f"| {o.shard.id} | {o.shard.pdfs} | {o.shard.estimated_pages} | {o.verdict} "
            f"| {o.retries} | {o.flow_run_name or '-'} |"
        )
    bad = [o for o in outcomes if not o.ok]
    if bad:
        lines += ["", "## PDFs not done", "", "| shard | PDF | reason |", "|---|---|---|"]
        for o in bad:
            pdfs = failed_pdfs.get(o.shard.id, ())
            if not pdfs:
                lines.append(f"| {o.shard.id} | (none found uncommitted) | {o.verdict} |")
            lines += [f"| {o.shard.id} | {p.uri} | {p.reason} |" for p in pdfs]
    return "\n".join(lines) + "\n"


def _bytes_per_page(pages_per_byte: float) -> str:
    return f"{1 / pages_per_byte:,.0f}" if pages_per_byte > 0 else "n/a"


def _error(plan: ScalePlan) -> str:
    e = plan.error
    if e is None:
        return "not measured (no sample)"
    return (
        f"total {e.total_relative_error:.1%}, per PDF median {e.median_relative_error:.1%} "
        f"({e.pdfs} PDFs)"
    )


def planner_summary(
    plan: ScalePlan, outcomes: Sequence[ShardOutcome], failed_pdfs: Mapping[str, Sequence[FailedPdf]]
) -> dict[str, Any]:
    """The planner flow's result: counts, every shard's run, and the failed shards' PDFs."""
    return {
        "shards": len(plan.shards),
        "pdfs": plan.pdfs,
        "estimated_pages": plan.estimated_pages,
        "completed": sum(o.ok for o in outcomes),
        "retries": sum(o.retries for o in outcomes),
        "shard_runs": {o.shard.id: o.flow_run_id for o in outcomes},
        "failed_shards": [
            {"shard": o.shard.id, "outcome": o.verdict, "flow_run": o.flow_run_name,
             "pdfs": [{"source": p.uri, "reason": p.reason} for p in failed_pdfs.get(o.shard.id, ())]}
            for o in outcomes if not o.ok
        ],
    }


def done_message(plan: ScalePlan, outcomes: Sequence[ShardOutcome]) -> str:
    return f"{len(outcomes)} shard(s) done: {plan.pdfs} PDFs, ~{plan.estimated_pages} pages"
