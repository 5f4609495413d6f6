"""What a run writes besides its results, recorded in the workspace.

`reprocess` works from a workspace, not from the run that filled it, so without a record
it could not know that the run wrote markdown (a workspace ended with 10 results and 9
`.md` files) or where the markdown went. Every `run` records its output options in
`OPTIONS_KEY`; `reprocess` takes each one it was not given from there.

The markdown root is fixed once per workspace: the first run that records options sets
it, and every later run, shard and reprocess keeps it, so one PDF always maps to one
`.md` path whichever run writes it. A workspace that already holds markdown but no
record was written before roots existed: its root stays None (sources mirrored whole),
so its old and new files share one layout.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

OPTIONS_KEY = "pagegate-outputs.json"


@dataclass(frozen=True)
class OutputOptions:
    """The options that change what a run writes: `.md` files, where, and flagged documents."""

    markdown: bool = False
    markdown_root: str | None = None  # run.sources' common folder (pagegate.io.sources.common_root)
    drop_on_page_errors: bool = False


def options_to_json(options: OutputOptions) -> str:
    return json.dumps(asdict(options), indent=2, sort_keys=True) + "\n"


def options_from_json(text: str) -> OutputOptions:
    """Read a record; fields it lacks take their defaults, fields it does not know are ignored."""
    data: Any = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("output options must be a JSON object")
    root = data.get("markdown_root")
    if root is not None and not isinstance(root, str):
        raise ValueError("markdown_root must be a string or null")
    return OutputOptions(
        markdown=data.get("markdown") is True,
        markdown_root=root,
        drop_on_page_errors=data.get("drop_on_page_errors") is True,
    )


def settle_options(
    recorded: OutputOptions | None,
    *,
    has_markdown: bool,
    markdown: bool,
    source_root: str | None,
    drop_on_page_errors: bool,
) -> OutputOptions:
    """The options a run records: its own flags, and the workspace's markdown root.

    `has_markdown`: the workspace's markdown/ holds files already. With no record those
    were mirrored whole, and the root stays None to keep them in one layout.
    """
    kept = recorded.markdown_root if recorded is not None else None
    root = kept if recorded is not None or has_markdown else source_root
    return OutputOptions(
        markdown=markdown, markdown_root=root, drop_on_page_errors=drop_on_page_errors
    )
