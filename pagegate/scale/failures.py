"""Which PDFs of a failed shard are not done, and why: read from the workspace itself.

The workspace is the truth about every PDF (a committed result, or a ledger record),
whatever happened to the flow runs: a shard whose run crashed has no summary, but its
manifest and the workspace still say which of its PDFs are missing. Only the shards
that did not complete are read, one existence check per PDF of theirs.
"""

from __future__ import annotations

from typing import Any

from pagegate.errors import DownloadError
from pagegate.io.storage import read_uri
from pagegate.output.ledger import ledger_key, record_from_json
from pagegate.output.workspace import Workspace
from pagegate.scale.shards import manifest_uris
from pagegate.scale.summary import FailedPdf


def uncommitted_pdfs(workspace: Workspace, manifest: str, *, s3_client: Any) -> list[FailedPdf]:
    """The manifest's PDFs without a committed result, with their ledger reason if any."""
    try:
        text = read_uri(manifest, s3_client=s3_client).decode("utf-8")
    except DownloadError as exc:
        return [FailedPdf(manifest, f"manifest unreadable: {exc.code}")]
    missing: list[FailedPdf] = []
    for uri in manifest_uris(text):
        if workspace.is_committed(uri):
            continue
        try:
            record = record_from_json(workspace.store.read_bytes(ledger_key(uri)).decode("utf-8"))
            reason = record.reason
        except DownloadError:
            reason = "not processed"
        missing.append(FailedPdf(uri, reason))
    return missing
