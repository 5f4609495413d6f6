"""Cut a listed collection into shards (one flow run each), with ids fixed by their keys.

Streaming: `iter_shards` holds one shard's URIs at a time, so a listing of millions of
keys never sits in memory.

Where a shard ends is decided by the keys themselves (content-defined chunking, as in
rsync or restic), not by a running count from the start of the listing. Each PDF has a
*load*, the share of a shard it fills: max(pages / target_pages, 1 / target_pdfs). Once
a shard holds half a shard's load, it ends after a PDF with probability load / 0.5,
drawn from a hash of that PDF's URI; it always ends at twice the load. Shards average
about one load, and a boundary depends only on the keys near it. So a key added or
removed between two listings changes the shard it falls in (and rarely its neighbour),
and every other shard keeps its keys and its id. Counting from the start would shift
every boundary after the change, and a second planner would recognise no shard.

A shard's id is a hash of its sorted URIs; the idempotency key of its flow run adds the
workspace and an optional salt. A second planner over the same keys therefore asks
Prefect for runs it already created, and gets them back instead of new ones.

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

MANIFEST_DIR = "shards"


@dataclass(frozen=True)
class ListedPdf:
    """One listed PDF with its estimated pages (pagegate.scale.estimate)."""

    uri: str
    pages: int
    size: int | None = None


@dataclass(frozen=True)
class Shard:
    """One shard: the PDFs of one flow run, in listing order."""

    id: str
    index: int
    uris: tuple[str, ...]
    estimated_pages: int
    bytes: int

    def __len__(self) -> int:
        return len(self.uris)


def shard_id(uris: Iterable[str]) -> str:
    """sha1 over the sorted URIs, newline-separated (order-free, no concatenation clashes)."""
    digest = hashlib.sha1("\n".join(sorted(uris)).encode("utf-8", "surrogatepass")).hexdigest()
    return f"s{digest[:16]}"


def boundary_rank(uri: str) -> float:
    """A uniform number in [0, 1) fixed by the URI: small ranks end shards."""
    digest = hashlib.sha1(b"cut\n" + uri.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def pdf_load(pages: int, *, target_pages: int, target_pdfs: int) -> float:
    """The share of a shard one PDF fills: by pages or by count, whichever is larger."""
    return max(max(1, pages) / target_pages, 1.0 / target_pdfs)


def iter_shards(
    pdfs: Iterable[ListedPdf], *, target_pages: int, target_pdfs: int
) -> Iterator[Shard]:
    """Cut PDFs, in the order given, into shards of about `target_pages` estimated pages
    or `target_pdfs` PDFs, whichever is reached first (at most twice either)."""
    if target_pages < 1 or target_pdfs < 1:
        raise ValueError("target_pages and target_pdfs must be at least 1")
    uris: list[str] = []
    pages = size = 0
    load = 0.0
    index = 0
    for pdf in pdfs:
        share = pdf_load(pdf.pages, target_pages=target_pages, target_pdfs=target_pdfs)
        uris.append(pdf.uri)
        pages += max(1, pdf.pages)
        size += pdf.size or 0
        load += share
        natural = load >= 0.5 and boundary_rank(pdf.uri) < share / 0.5
        if natural or load >= 2.0 - 1e-9:
            yield Shard(shard_id(uris), index, tuple(uris), pages, size)
            index += 1
            uris, pages, size, load = [], 0, 0, 0.0
    if uris:
        yield Shard(shard_id(uris), index, tuple(uris), pages, size)


def manifest_key(shard: str) -> str:
    """Workspace-relative key of a shard's manifest (its URIs, one per line)."""
    return f"{MANIFEST_DIR}/{shard}.txt"


def manifest_text(shard: Shard) -> str:
    """A source list file (pagegate.io.sources reads .txt lists; '#' lines are comments)."""
    head = f"# pagegate shard {shard.id}: {len(shard)} PDFs, ~{shard.estimated_pages} pages\n"
    return head + "".join(f"{uri}\n" for uri in shard.uris)


def manifest_uris(text: str) -> list[str]:
    """The URIs of a manifest written by `manifest_text`."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def shard_run_key(workspace: str, shard: str, salt: str = "") -> str:
    """Idempotency key of a shard's flow run: same keys into the same workspace, same run.

    `salt` (e.g. a date) makes a deliberate rerun of identical shards create new runs.
    """
    payload = "\n".join((workspace.rstrip("/"), shard, salt)).encode("utf-8", "surrogatepass")
    return f"pagegate-shard-{hashlib.sha1(payload).hexdigest()[:24]}"
