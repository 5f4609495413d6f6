"""`pagegate stats WORKSPACE`: done, failed with reasons, pages, tokens, work remaining."""

from __future__ import annotations

from typing import Annotated

import typer

from pagegate.report.stats import collect_stats, format_stats


def stats_command(
    workspace: Annotated[str, typer.Argument(help="Workspace: local folder or s3://bucket/prefix.")],
    source: Annotated[
        list[str] | None,
        typer.Option(
            "--source",
            help="List these sources now to count remaining work (repeatable); "
            "default: the plans recorded by earlier runs.",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """Summarize a workspace: done, failed (with reasons), pages, tokens, remaining work."""
    stats = collect_stats(workspace, sources=source or None)
    typer.echo(stats.to_json() if json_out else format_stats(stats).rstrip("\n"))
