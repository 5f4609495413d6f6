"""The flows' reads and writes of the workspace's output options (pagegate.output.options).

Blocking I/O; the flows run these in a thread, after the preflight has found the
workspace writable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pagegate.config import RunConfig
from pagegate.io.s3 import LazyS3Client
from pagegate.output.options import OutputOptions, settle_options
from pagegate.output.workspace import Workspace


def _workspace(config: RunConfig) -> Workspace:
    client = LazyS3Client(retry_mode=config.s3_retry_mode, credentials=config.s3_credentials)
    return Workspace.open(config.workspace, s3_client=client)


def record_options(
    workspace: Workspace, *, source_root: str | None, markdown: bool, drop_on_page_errors: bool
) -> OutputOptions:
    """Record a run's output options in `workspace`; what was recorded."""
    recorded = workspace.read_options()
    options = settle_options(
        recorded,
        has_markdown=recorded is None and workspace.has_markdown(),
        markdown=markdown,
        source_root=source_root,
        drop_on_page_errors=drop_on_page_errors,
    )
    if options != recorded:
        workspace.write_options(options)
    return options


def record_output_options(config: RunConfig, source_root: str | None) -> RunConfig:
    """Record this run's output options; the config with the workspace's markdown root."""
    options = record_options(
        _workspace(config), source_root=source_root, markdown=config.markdown,
        drop_on_page_errors=config.drop_on_page_errors,
    )
    return replace(config, markdown_root=options.markdown_root)


def record_shard_options(
    workspace: Workspace, source_root: str | None, shard_parameters: Mapping[str, Any]
) -> OutputOptions:
    """The planner's record, from its whole listing, before any shard run records its own."""
    return record_options(
        workspace, source_root=source_root,
        markdown=bool(shard_parameters.get("markdown", RunConfig.markdown)),
        drop_on_page_errors=bool(
            shard_parameters.get("drop_on_page_errors", RunConfig.drop_on_page_errors)
        ),
    )


def with_recorded_options(
    config: RunConfig, *, markdown: bool | None, drop_on_page_errors: bool | None
) -> RunConfig:
    """A reprocess run's config: each output option it was given, else the recorded one.

    Nothing is recorded: reprocess redoes PDFs in the workspace's layout, it does not
    choose one.
    """
    recorded = _workspace(config).read_options() or OutputOptions()
    return replace(
        config,
        markdown=recorded.markdown if markdown is None else markdown,
        drop_on_page_errors=(
            recorded.drop_on_page_errors if drop_on_page_errors is None else drop_on_page_errors
        ),
        markdown_root=recorded.markdown_root,
    )
