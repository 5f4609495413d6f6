"""The workspace: where results, markdown and the failure ledger live.

Layout (relative to the workspace root, local or S3):

    results/<document_id>.jsonl     one Dolma line per PDF; its existence means "done"
    markdown/<path below the source root>.md   with --markdown
    layout/<document_id>.jsonl      with --layout: one line of blocks per page
    ledger/<document_id>.json       one failure record per PDF that could not be processed
    pagegate-outputs.json           the output options of the last run (pagegate.output.options)

The result object is the commit marker and is written last, atomically, so a PDF is
either fully done or not done; markdown is written before it. A later success removes
the PDF's ledger record; markdown and the layout sidecar are written before it. One exception: a document committed with too many fallback
pages keeps a `page_error_rate` record beside it (written first), so `reprocess` can
find it. Runs that overlap split the groups by claims (pagegate.claims), and every write
is a whole-object replace of a key derived from the source URI, so even two runs that
both converted a PDF write one result, never two.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from pagegate.errors import DownloadError
from pagegate.io.storage import open_store
from pagegate.io.store import Store
from pagegate.output.documents import document_id, dolma_line, markdown_relpath, markdown_text
from pagegate.output.ledger import (
    FailureRecord,
    ledger_key,
    record_from_json,
    record_to_json,
    result_key,
)
from pagegate.output.options import (
    OPTIONS_KEY,
    OutputOptions,
    options_from_json,
    options_to_json,
)


def layout_key(source_uri: str) -> str:
    """Where the layout sidecar of `source_uri` goes, beside its result."""
    return f"layout/{document_id(source_uri)}.jsonl"


class Workspace:
    """Thin I/O over a Store for the workspace layout above. Methods are blocking."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @classmethod
    def open(cls, uri: str, *, s3_client: Any | None = None) -> Workspace:
        return cls(open_store(uri, s3_client=s3_client))

    @property
    def uri(self) -> str:
        return self.store.uri

    def is_committed(self, source_uri: str) -> bool:
        return self.store.exists(result_key(source_uri))

    def has_failure(self, source_uri: str) -> bool:
        return self.store.exists(ledger_key(source_uri))

    def commit_document(
        self,
        source_uri: str,
        doc: dict[str, Any],
        *,
        markdown: bool,
        markdown_root: str | None = None,
        flag: FailureRecord | None = None,
        layout: str | None = None,
        guard: Callable[[], None] = lambda: None,
        exclusive: bool = False,
    ) -> str | None:
        """Write markdown (optional), then the result object; clear any old ledger record.

        With `flag` (a page_error_rate record) the record is written first and kept: a
        crash before the result lands leaves a recorded, uncommitted PDF, which every
        later run redoes anyway. `guard` runs before each write and raises to stop the
        rest (a run whose claim on the PDF's group lapsed, pagegate.claims.holder).

        `exclusive`: the result is created only if none exists (a run that skips committed
        PDFs). None when another run's result was there first: it stands, and this run's
        markdown, written just before, is put back to that result's text, so the two agree.
        """
        if flag is not None:
            guard()
            self.store.write_bytes(ledger_key(flag.source), record_to_json(flag).encode("utf-8"))
        if markdown:
            md_key = "markdown/" + markdown_relpath(source_uri, markdown_root)
            guard()
            self.store.write_bytes(md_key, markdown_text(doc).encode("utf-8"))
        if layout is not None:
            guard()
            self.store.write_bytes(layout_key(source_uri), layout.encode("utf-8"))
        key = result_key(source_uri)
        guard()
        if not exclusive:
            self.store.write_bytes(key, dolma_line(doc).encode("utf-8"))
        elif not self.store.create(key, dolma_line(doc).encode("utf-8")):
            if markdown:
                theirs = json.loads(self.store.read_bytes(key))
                self.store.write_bytes(md_key, markdown_text(theirs).encode("utf-8"))
            return None
        if flag is None:
            self.store.delete(ledger_key(source_uri))
        return self.store.uri_for(key)

    def record_failure(self, record: FailureRecord, *,
                       guard: Callable[[], None] = lambda: None) -> str:
        """Write the record, then take it back if the PDF is committed after all.

        An overlapping run may commit the same PDF meanwhile. It writes the result and
        then deletes the record; we write the record and then look for the result. In
        any interleaving one of the two removes the record, so no stale failure
        survives beside a committed result. (A page_error_rate record may sit beside a
        committed, flagged document: it is kept.)
        """
        key = ledger_key(record.source)
        guard()
        self.store.write_bytes(key, record_to_json(record).encode("utf-8"))
        if record.reason != "page_error_rate" and self.is_committed(record.source):
            self.store.delete(key)
        return self.store.uri_for(key)

    def read_options(self) -> OutputOptions | None:
        """The recorded output options; None in a workspace that has none yet."""
        try:
            data = self.store.read_bytes(OPTIONS_KEY)
        except DownloadError as exc:
            if exc.code == "NoSuchKey":
                return None
            raise
        return options_from_json(data.decode("utf-8"))

    def write_options(self, options: OutputOptions) -> None:
        self.store.write_bytes(OPTIONS_KEY, options_to_json(options).encode("utf-8"))

    def has_markdown(self) -> bool:
        """Whether markdown/ holds anything (one listing request)."""
        return next(iter(self.store.list("markdown/")), None) is not None

    def iter_failures(self) -> Iterator[FailureRecord]:
        for info in self.store.list("ledger/"):
            if info.key.endswith(".json"):
                yield record_from_json(self.store.read_bytes(info.key).decode("utf-8"))

    def iter_result_keys(self) -> Iterator[str]:
        for info in self.store.list("results/"):
            if info.key.endswith(".jsonl"):
                yield info.key
