"""Cut a stream of PDFs into work groups of about N pages, with stable ids.

Pure: the caller supplies page counts (it has read the PDFs); this module only decides
the cut. The same input in the same order gives the same groups and the same ids, so a
rerun over the same input finds the groups it already did.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class PlannedPdf:
    """One source PDF as the planner sees it.

    `pages` is None when the PDF could not be opened at planning time; it still gets a
    group (weighted as one page), so the group task records its failure in the ledger
    with the same code path as every other PDF.
    """

    uri: str
    pages: int | None

    @property
    def weight(self) -> int:
        return max(1, self.pages or 0)


@dataclass(frozen=True)
class Group:
    """A unit of work for one Prefect task: a few PDFs, about `pages_per_group` pages."""

    id: str
    uris: tuple[str, ...]
    pages: int

    def __len__(self) -> int:
        return len(self.uris)


def group_id(uris: Iterable[str]) -> str:
    """A stable id for a set of PDFs: sha1 over the sorted URIs, newline-separated.

    Sorting makes the id independent of listing order; the separator keeps
    ("ab", "c") and ("a", "bc") apart (olmOCR concatenates without one).
    """
    digest = hashlib.sha1("\n".join(sorted(uris)).encode("utf-8")).hexdigest()
    return f"g{digest[:16]}"


def iter_groups(pdfs: Iterable[PlannedPdf], pages_per_group: int) -> Iterator[Group]:
    """Cut PDFs, in the order given, into consecutive groups of about `pages_per_group` pages.

    A group closes before a PDF that would push it past the target, so a group of several
    PDFs never exceeds it; a PDF larger than the target forms a group of its own rather
    than being split (a document is committed whole). Streaming: holds one group at a time.
    """
    if pages_per_group < 1:
        raise ValueError("pages_per_group must be at least 1")
    uris: list[str] = []
    pages = 0
    for pdf in pdfs:
        if uris and pages + pdf.weight > pages_per_group:
            yield Group(group_id(uris), tuple(uris), pages)
            uris, pages = [], 0
        uris.append(pdf.uri)
        pages += pdf.weight
        if pages >= pages_per_group:
            yield Group(group_id(uris), tuple(uris), pages)
            uris, pages = [], 0
    if uris:
        yield Group(group_id(uris), tuple(uris), pages)


def plan_groups(pdfs: Iterable[PlannedPdf], pages_per_group: int) -> list[Group]:
    """All groups at once (the flow fans them out as tasks)."""
    return list(iter_groups(pdfs, pages_per_group))
