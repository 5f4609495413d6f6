"""`pagegate stats WORKSPACE`: done, failed with reasons, pages, tokens, work remaining."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from pagegate.cli.outcome import fail, one_line_errors
from pagegate.io.storage import open_store
from pagegate.io.store import S3_SCHEME
from pagegate.report.stats import collect_stats, format_stats


def workspace_exists(uri: str) -> bool:
    """A local folder that exists, or an S3 prefix with at least one object under it."""
    store = open_store(uri)
    return os.path.isdir(store.uri) if not uri.startswith(S3_SCHEME) else next(store.list(), None) is not None


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
    """Summarize a workspace: done, failed (with reasons), pages, tokens, remaining work.

    Exits 2 when WORKSPACE holds nothing: a mistyped path must not read as an empty one.
    """
    with one_line_errors(debug=False):
        if not workspace_exists(workspace):
            fail(f"workspace {workspace} does not exist (or holds nothing); check the path")
        stats = collect_stats(workspace, sources=source or None)
    typer.echo(stats.to_json() if json_out else format_stats(stats).rstrip("\n"))
