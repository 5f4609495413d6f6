"""The workspace's record of a run's output options, and the markdown root it fixes."""

from __future__ import annotations

from pathlib import Path

import pytest

from pagegate.output.options import (
    OPTIONS_KEY,
    OutputOptions,
    options_from_json,
    options_to_json,
    settle_options,
)
from pagegate.output.workspace import Workspace
from pagegate.tasks.output_options import record_options

DOC = {"id": "x", "text": "# hello", "metadata": {}}


def test_a_record_reads_back_as_written_and_tolerates_fields_it_does_not_know() -> None:
    options = OutputOptions(markdown=True, markdown_root="s3://b/pdfs/", drop_on_page_errors=True)
    assert options_from_json(options_to_json(options)) == options
    assert options_from_json('{"markdown": true, "later_field": 1}') == OutputOptions(markdown=True)
    with pytest.raises(ValueError):
        options_from_json('{"markdown_root": 5}')


def test_the_first_record_takes_the_run_root_and_later_runs_keep_it() -> None:
    first = settle_options(
        None, has_markdown=False, markdown=True, source_root="/data/a/", drop_on_page_errors=False
    )
    assert first == OutputOptions(markdown=True, markdown_root="/data/a/")
    later = settle_options(
        first, has_markdown=True, markdown=False, source_root="/data/", drop_on_page_errors=True
    )
    assert later == OutputOptions(markdown=False, markdown_root="/data/a/", drop_on_page_errors=True)


def test_a_workspace_with_markdown_but_no_record_keeps_mirroring(tmp_path: Path) -> None:
    """Written before roots existed: its new .md files land beside its old ones."""
    workspace = Workspace.open(str(tmp_path / "ws"))
    workspace.commit_document("/data/pdfs/old.pdf", DOC, markdown=True)
    assert (tmp_path / "ws" / "markdown" / "data" / "pdfs" / "old.md").is_file()

    options = record_options(
        workspace, source_root="/data/pdfs/", markdown=True, drop_on_page_errors=False
    )

    assert options.markdown_root is None
    assert workspace.read_options() == options
    workspace.commit_document("/data/pdfs/new.pdf", DOC, markdown=True, markdown_root=None)
    assert (tmp_path / "ws" / "markdown" / "data" / "pdfs" / "new.md").is_file()


def test_a_new_workspace_records_the_root_once(tmp_path: Path) -> None:
    workspace = Workspace.open(str(tmp_path / "ws"))
    assert workspace.read_options() is None
    record_options(workspace, source_root="/data/a/", markdown=True, drop_on_page_errors=False)
    again = record_options(
        workspace, source_root="/elsewhere/", markdown=False, drop_on_page_errors=False
    )
    assert again == OutputOptions(markdown=False, markdown_root="/data/a/")
    assert (tmp_path / "ws" / OPTIONS_KEY).is_file()
