"""Plan only what is left to do: drop committed PDFs before anything is downloaded.

Counting pages reads every listed PDF (in counting processes, pagegate.plan.count). On a rerun over a mostly finished collection
that would download everything again; here a committed PDF costs one existence check
(HEAD on S3) and is left out of the groups before anything is downloaded. The check in
`process_pdf` stays: it covers PDFs another run commits after planning.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pagegate.claims.board import Board
from pagegate.io.pool import ordered_map
from pagegate.io.sources import common_root, iter_sources
from pagegate.output.workspace import Workspace
from pagegate.pdf.counter import CountSettings, PageCounter
from pagegate.plan.count import count_pages
from pagegate.plan.groups import Group, PlannedPdf, plan_groups
from pagegate.plan.shared import SharedPlan, plan_shared, read_parts


@dataclass(frozen=True)
class MissingSource:
    """A source entry that names nothing (a list's line, a pattern): recorded, not fatal."""

    uri: str
    detail: str


@dataclass(frozen=True)
class PendingPlan:
    """The groups still to do, how many listed PDFs were already committed, the
    entries that named nothing, and the sources' common root (markdown paths)."""

    groups: tuple[Group, ...]
    already_done: int
    missing: tuple[MissingSource, ...] = ()
    source_root: str | None = None
    mark: float | None = None  # when planning began, by the workspace's clock (Board.mark)

    @property
    def pdfs(self) -> int:
        return sum(len(g) for g in self.groups)

    @property
    def pages(self) -> int:
        return sum(g.pages for g in self.groups)


def plan_pending(
    sources: Iterable[str],
    *,
    workspace: Workspace | None,
    pages_per_group: int,
    s3_client: Any,
    password: str | None = None,
    workers: int = 8,
    counting: CountSettings | PageCounter | None = None,
    shared_as: str | None = None,
) -> PendingPlan:
    """List `sources`, skip PDFs committed in `workspace` (None: skip nothing), cut groups.

    An entry that names nothing is kept in `missing` and the listing goes on. Pages are
    counted in counting processes (`counting`: their settings, or a counter to use).
    With `shared_as` (this run's name) the groups are the workspace's shared plan
    (pagegate.plan.shared): PDFs another run planned keep its groups and its counts.
    """
    done: set[str] = set()
    missing: list[MissingSource] = []
    roots: list[str] = []
    shared, mark = SharedPlan(), None
    if shared_as is not None and workspace is not None:
        mark = Board(workspace.store, shared_as).mark()  # before anything is looked at
        read_parts(workspace.store, shared)

    def check(uri: str) -> PlannedPdf | None:
        if workspace is not None and workspace.is_committed(uri):
            return None
        group_id = shared.group_of.get(uri)
        if group_id is not None:
            return next(p for p in shared.groups[group_id] if p.uri == uri)
        return count_pages(uri, counter=counter, s3_client=s3_client, password=password)

    def todo(uris: Iterable[str]) -> Iterator[PlannedPdf]:
        for uri, pdf in zip(uris, ordered_map(check, uris, workers=workers), strict=True):
            if pdf is None:
                done.add(uri)
            else:
                yield pdf

    listing = iter_sources(
        list(sources), s3_client=s3_client,
        on_missing=lambda uri, detail: missing.append(MissingSource(uri, detail)),
        on_root=roots.append,
    )
    uris = [info.uri for info in listing]
    with _counter(counting) as counter:
        pending = list(todo(uris))
    if shared_as is not None and workspace is not None:
        groups = plan_shared(workspace.store, shared, pending,
                             pages_per_group=pages_per_group, run=shared_as)
        done -= {uri for group in groups for uri in group.uris}  # counted when its group runs
    else:
        groups = plan_groups(pending, pages_per_group)
    return PendingPlan(tuple(groups), len(done), tuple(missing), common_root(roots), mark)


def plan_uris(
    uris: Iterable[str],
    *,
    pages_per_group: int,
    s3_client: Any,
    password: str | None = None,
    workers: int = 8,
    counting: CountSettings | PageCounter | None = None,
) -> PendingPlan:
    """Groups over exactly these PDFs (no listing, no skipping): what `reprocess` redoes."""
    with _counter(counting) as counter:
        counted = ordered_map(
            lambda uri: count_pages(uri, counter=counter, s3_client=s3_client, password=password),
            dict.fromkeys(uris),  # keeps the order, drops repeats
            workers=workers,
        )
        groups = plan_groups(counted, pages_per_group)
    return PendingPlan(tuple(groups), 0)


@contextmanager
def _counter(counting: CountSettings | PageCounter | None) -> Iterator[PageCounter]:
    """The counter given (left open for its owner), or one of our own, closed at the end."""
    if isinstance(counting, PageCounter):
        yield counting
        return
    with PageCounter(counting) as counter:
        yield counter
