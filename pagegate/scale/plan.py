"""Plan a scale-out job: list the sources once, estimate pages, cut shards, write manifests.

Memory stays bounded however many keys are listed: the listing is streamed
(pagegate.io.sources), the page model is fitted on a sample drawn from the first
`sample_lookahead` listed PDFs (the only ones held at once; their page counts are read
from a few blocks of each, pagegate.io.range_read), and each shard's URIs are
written to its manifest as soon as the shard is cut. What is kept is one small
`PlannedShard` per shard.

Why manifests: a shard run gets its keys as one `sources` entry, the manifest's URI
(`sources` reads .txt lists). Prefect stores every flow run's parameters in its
database and shows them in the UI; a million keys passed inline would be ~100 MB of
parameters. A manifest's name is its shard id (a hash of its keys), so writing it
again writes the same bytes: two planners never disagree about a manifest.

The planner does not check which PDFs are already committed: that is one request per
key, and the shard runs do it anyway, spread over the nodes (pagegate.plan.pending).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pagegate.config import PlannerConfig
from pagegate.io.pool import ordered_map
from pagegate.io.range_read import ranged_page_count
from pagegate.io.sources import common_root, iter_sources
from pagegate.io.store import ObjectInfo, Store
from pagegate.scale.estimate import (
    EstimateError,
    PageModel,
    SizedPdf,
    fit_page_model,
    leave_one_out,
    sample_rank,
)
from pagegate.scale.shards import ListedPdf, Shard, iter_shards, manifest_key, manifest_text


@dataclass(frozen=True)
class PlannedShard:
    """A shard as the planner keeps it: counts and the manifest, not the URIs."""

    id: str
    index: int
    pdfs: int
    estimated_pages: int
    bytes: int
    manifest: str  # full URI of the manifest (.txt source list)


@dataclass(frozen=True)
class ScalePlan:
    shards: tuple[PlannedShard, ...]
    model: PageModel
    error: EstimateError | None
    source_root: str | None = None  # every shard's markdown root (pagegate.output.options)

    @property
    def pdfs(self) -> int:
        return sum(s.pdfs for s in self.shards)

    @property
    def estimated_pages(self) -> int:
        return sum(s.estimated_pages for s in self.shards)


def fit_on_sample(
    listed: Sequence[ObjectInfo],
    *,
    sample_size: int,
    s3_client: Any,
    workers: int = 8,
) -> tuple[PageModel, EstimateError | None]:
    """Count the pages of the `sample_size` PDFs of `listed` with the smallest sample
    ranks, reading a few blocks of each (pagegate.io.range_read), and fit the model."""
    chosen = heapq.nsmallest(sample_size, listed, key=lambda info: sample_rank(info.uri))

    def counted(info: ObjectInfo) -> SizedPdf | None:
        if not info.size:
            return None
        pages, _ = ranged_page_count(info.uri, info.size, s3_client=s3_client)
        return SizedPdf(info.size, pages) if pages else None

    sample = [s for s in ordered_map(counted, chosen, workers=workers) if s is not None]
    return fit_page_model(sample), leave_one_out(sample)


def plan_shards(
    sources: Sequence[str],
    *,
    workspace: Store,
    target_pages: int,
    target_pdfs: int,
    s3_client: Any,
    sample_size: int = PlannerConfig.sample_size,
    sample_lookahead: int = PlannerConfig.sample_lookahead,
    bytes_per_page: float | None = None,
    write_manifests: bool = True,
) -> ScalePlan:
    """List, estimate, cut and write manifests (see the module docstring).

    `bytes_per_page` given (or `sample_size` 0): no sampling, pages from sizes alone.
    """
    roots: list[str] = []
    listing = iter_sources(list(sources), s3_client=s3_client, on_root=roots.append)
    error: EstimateError | None = None
    if bytes_per_page is not None:
        model = PageModel.from_bytes_per_page(bytes_per_page)
        head: list[ObjectInfo] = []
    elif sample_size <= 0:
        model = fit_page_model(())
        head = []
    else:
        head = list(itertools.islice(listing, sample_lookahead))
        model, error = fit_on_sample(head, sample_size=sample_size, s3_client=s3_client)
    shards = [
        _write(shard, workspace, write_manifests)
        for shard in iter_shards(
            _estimated(itertools.chain(head, listing), model),
            target_pages=target_pages,
            target_pdfs=target_pdfs,
        )
    ]
    return ScalePlan(tuple(shards), model, error, common_root(roots))


def _estimated(listing: Iterable[ObjectInfo], model: PageModel) -> Iterator[ListedPdf]:
    for info in listing:
        yield ListedPdf(info.uri, model.estimate(info.size), info.size)


def _write(shard: Shard, workspace: Store, write: bool) -> PlannedShard:
    key = manifest_key(shard.id)
    if write:
        workspace.write_bytes(key, manifest_text(shard).encode("utf-8"))
    return PlannedShard(
        shard.id, shard.index, len(shard), shard.estimated_pages, shard.bytes,
        workspace.uri_for(key),
    )
