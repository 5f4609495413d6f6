"""`pagegate plan SOURCES... --workspace W`: cut a job into shards and show the plan.

What the `ocr-planner` flow does before it launches anything: list, estimate pages
from a sample, cut shards, write their manifests (unless --dry-run), with the same
defaults (PlannerConfig). Useful to size a cluster job (docs/cluster.md) and to check
the estimate's error before spending GPU time.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from pagegate.config import PlannerConfig
from pagegate.io.s3 import make_s3_client
from pagegate.output.workspace import Workspace
from pagegate.scale.plan import plan_shards


def plan_command(
    sources: Annotated[list[str], typer.Argument(help="s3://bucket/prefix, globs, folders, .txt lists.")],
    workspace: Annotated[str, typer.Option(help="Workspace the shards' manifests go to.")],
    pages_per_shard: Annotated[int, typer.Option(help="Target estimated pages per shard.")] = PlannerConfig.pages_per_shard,
    pdfs_per_shard: Annotated[int, typer.Option(help="Target PDFs per shard.")] = PlannerConfig.pdfs_per_shard,
    sample_size: Annotated[int, typer.Option(help="PDFs whose page counts fit the estimate.")] = PlannerConfig.sample_size,
    bytes_per_page: Annotated[
        float | None, typer.Option(help="Known bytes per page: no sampling.")
    ] = PlannerConfig.bytes_per_page,
    dry_run: Annotated[bool, typer.Option(help="Do not write the manifests.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Cut SOURCES into shards as the planner would, and print them with the estimate."""
    client = make_s3_client()
    started = time.monotonic()
    plan = plan_shards(
        sources, workspace=Workspace.open(workspace, s3_client=client).store,
        target_pages=pages_per_shard, target_pdfs=pdfs_per_shard, s3_client=client,
        sample_size=sample_size, bytes_per_page=bytes_per_page, write_manifests=not dry_run,
    )
    elapsed = time.monotonic() - started
    error = plan.error
    if json_out:
        typer.echo(json.dumps({
            "pdfs": plan.pdfs, "estimated_pages": plan.estimated_pages, "seconds": round(elapsed, 2),
            "bytes_per_page": 1 / plan.model.pages_per_byte, "sampled": plan.model.sample_pdfs,
            "error_total": error.total_relative_error if error else None,
            "error_per_pdf_median": error.median_relative_error if error else None,
            "shards": [{"id": s.id, "pdfs": s.pdfs, "estimated_pages": s.estimated_pages,
                        "manifest": s.manifest} for s in plan.shards],
        }))
        return
    typer.echo(f"{plan.pdfs} PDFs, ~{plan.estimated_pages} pages, {len(plan.shards)} shard(s), "
               f"planned in {elapsed:.1f} s")
    typer.echo(f"estimate: {1 / plan.model.pages_per_byte:,.0f} bytes per page from "
               f"{plan.model.sample_pdfs} sampled PDF(s)" + (
                   f"; leave-one-out error: total {error.total_relative_error:.1%}, "
                   f"per PDF median {error.median_relative_error:.1%}" if error else ""))
    for s in plan.shards[:20]:
        typer.echo(f"  {s.id}  {s.pdfs:>6} PDFs  ~{s.estimated_pages:>8} pages  {s.manifest}")
    if len(plan.shards) > 20:
        typer.echo(f"  ... {len(plan.shards) - 20} more")
    if dry_run:
        typer.echo("dry run: no manifest written")
