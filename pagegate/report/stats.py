"""What a workspace holds and what is left to do: the numbers behind `pagegate stats`.

Everything is read from the workspace itself, local or S3, so the figures match it
whatever ran there (CLI runs, deployments, shards, reprocessing):

- done: one per result object; pages, fallback pages and tokens from each Dolma line's
  metadata (every result is read: a full scan, parallel, ~1 GET per document);
- failed: ledger records of PDFs that have no result, grouped by reason; a record
  beside a result is a committed document flagged for too many fallback pages;
- remaining: the work runs were asked to do that has no result yet. By default that is
  the union of every run's recorded plan (runs/*/plan.json): each PDF a run planned,
  with the page count the planner read. With `sources`, the sources are listed now
  instead (no PDF is read), and pages of PDFs no plan has seen are estimated from the
  mean pages of done PDFs;
- time left: remaining pages at the pages/s of the last finished run (runs/*/run.json).

Within a planned group the plan keeps only the group's page total; when some of the
group is done, its leftover pages are shared evenly among the PDFs not done (exact when
a group is all done or all left, which is the usual case).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pagegate.io.pool import ordered_map
from pagegate.io.storage import open_store
from pagegate.io.store import S3Client, Store
from pagegate.output.ledger import FailureRecord, record_from_json
from pagegate.report.progress import format_duration
from pagegate.report.records import (
    PLAN_NAME,
    RECORD_NAME,
    RUNS_PREFIX,
    RunPlan,
    latest,
    plan_from_json,
)
from pagegate.report.records import record_from_json as run_record_from_json

READ_WORKERS = 16


@dataclass(frozen=True)
class ResultMeta:
    """The figures of one committed document (from its Dolma metadata)."""

    source: str
    pages: int
    fallback_pages: int
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Remaining:
    basis: str                    # "plans" or "sources"
    planned_pdfs: int             # PDFs known to the basis
    pdfs: int                     # of those, without a result
    pages: int                    # projected pages of those
    pages_estimated: bool         # some pages come from the mean of done PDFs
    seconds: float | None = None  # at the last run's pages/s


@dataclass(frozen=True)
class WorkspaceStats:
    workspace: str
    done_pdfs: int
    done_pages: int
    fallback_pages: int
    input_tokens: int
    output_tokens: int
    failed_pdfs: int
    failed_by_reason: dict[str, int]
    failures: list[dict[str, Any]]
    flagged_pdfs: int
    runs: int
    remaining: Remaining | None
    last_run: dict[str, Any] | None = None
    unreadable: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, ensure_ascii=False)


# --------------------------------------------------------------------------- pure


def result_meta(line: str) -> ResultMeta:
    """Read the figures out of one Dolma JSONL line (ValueError when it is not one)."""
    doc = json.loads(line)
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("Source-File"), str):
        raise ValueError("not a pagegate Dolma document (no metadata.Source-File)")
    return ResultMeta(
        source=meta["Source-File"],
        pages=int(meta.get("pdf-total-pages") or 0),
        fallback_pages=int(meta.get("total-fallback-pages") or 0),
        input_tokens=int(meta.get("total-input-tokens") or 0),
        output_tokens=int(meta.get("total-output-tokens") or 0),
    )


def remaining_from_plans(
    plans: Iterable[RunPlan], done_pages: Mapping[str, int]
) -> tuple[int, int, float]:
    """(planned PDFs, PDFs without a result, their projected pages) over all plans.

    Plans are applied oldest first, so a PDF planned twice takes its newest weight.
    """
    weights: dict[str, float] = {}
    for plan in sorted(plans, key=lambda p: p.created_at):
        for group in plan.groups:
            undone = [u for u in group.uris if u not in done_pages]
            left = group.pages - sum(done_pages[u] for u in group.uris if u in done_pages)
            share = max(float(len(undone)), float(left)) / len(undone) if undone else 0.0
            for uri in group.uris:
                weights[uri] = 0.0 if uri in done_pages else share
    remaining = [w for u, w in weights.items() if u not in done_pages]
    return len(weights), len(remaining), sum(remaining)


def remaining_from_sources(
    listed: Iterable[str], plans: Iterable[RunPlan], done_pages: Mapping[str, int]
) -> tuple[int, int, float, bool]:
    """Like `remaining_from_plans` over a fresh listing; unplanned PDFs get the mean."""
    planned: dict[str, float] = {}
    for plan in sorted(plans, key=lambda p: p.created_at):
        for group in plan.groups:
            for uri in group.uris:
                planned[uri] = group.pages / len(group.uris)
    mean = sum(done_pages.values()) / len(done_pages) if done_pages else 1.0
    total = undone = 0
    pages = 0.0
    estimated = False
    for uri in listed:
        total += 1
        if uri in done_pages:
            continue
        undone += 1
        if uri in planned:
            pages += planned[uri]
        else:
            pages += mean
            estimated = True
    return total, undone, pages, estimated


def summarize(
    workspace: str,
    results: Sequence[ResultMeta],
    records: Sequence[FailureRecord],
    plans: Sequence[RunPlan],
    run_records: Sequence[Mapping[str, Any]],
    *,
    listed: Iterable[str] | None = None,
    unreadable: Sequence[str] = (),
) -> WorkspaceStats:
    """All figures from what was read; `listed` switches remaining work to a live listing."""
    done_pages = {r.source: r.pages for r in results}
    failed = [r for r in records if r.source not in done_pages]
    flagged = [r for r in records if r.source in done_pages]
    last = latest(run_records)
    rate = float(last.get("pages_per_second") or 0.0) if last else 0.0
    remaining: Remaining | None = None
    if listed is not None:
        total, undone, pages, estimated = remaining_from_sources(listed, plans, done_pages)
        remaining = Remaining("sources", total, undone, round(pages), estimated)
    elif plans:
        total, undone, pages_f = remaining_from_plans(plans, done_pages)
        remaining = Remaining("plans", total, undone, round(pages_f), False)
    if remaining is not None and rate > 0:
        remaining = Remaining(**{**asdict(remaining), "seconds": round(remaining.pages / rate, 1)})
    return WorkspaceStats(
        workspace=workspace,
        done_pdfs=len(done_pages),
        done_pages=sum(r.pages for r in results),
        fallback_pages=sum(r.fallback_pages for r in results),
        input_tokens=sum(r.input_tokens for r in results),
        output_tokens=sum(r.output_tokens for r in results),
        failed_pdfs=len(failed),
        failed_by_reason=dict(Counter(r.reason for r in failed).most_common()),
        failures=[
            {"source": r.source, "reason": r.reason, "detail": r.detail, "at": r.at}
            for r in sorted(failed, key=lambda r: (r.reason, r.source))
        ],
        flagged_pdfs=len(flagged),
        runs=len({p.run_id for p in plans} | {str(r.get("run_id")) for r in run_records}),
        remaining=remaining,
        last_run=dict(last) if last else None,
        unreadable=list(unreadable),
    )


# --------------------------------------------------------------------------- I/O


def collect_stats(
    uri: str,
    *,
    sources: Sequence[str] | None = None,
    s3_client: S3Client | None = None,
    workers: int = READ_WORKERS,
) -> WorkspaceStats:
    """Read the workspace at `uri` (local or s3://) and summarize it (blocking)."""
    store = open_store(uri, s3_client=s3_client)
    unreadable: list[str] = []
    results = list(_read_all(store, "results/", ".jsonl", _parse_result, workers, unreadable))
    records = list(_read_all(store, "ledger/", ".json", _parse_record, workers, unreadable))
    plans = list(_read_all(store, RUNS_PREFIX, "/" + PLAN_NAME, plan_from_json, workers, unreadable))
    runs = list(_read_all(store, RUNS_PREFIX, "/" + RECORD_NAME, run_record_from_json, workers,
                          unreadable))
    listed: list[str] | None = None
    if sources:
        from pagegate.io.sources import iter_sources

        listed = [info.uri for info in iter_sources(list(sources), s3_client=s3_client)]
    return summarize(store.uri, results, records, plans, runs, listed=listed, unreadable=unreadable)


def _parse_result(data: bytes) -> ResultMeta:
    return result_meta(data.decode("utf-8").splitlines()[0])


def _parse_record(data: bytes) -> FailureRecord:
    return record_from_json(data.decode("utf-8"))


def _read_all(
    store: Store, prefix: str, suffix: str, parse: Any, workers: int, unreadable: list[str]
) -> Iterator[Any]:
    """Parse every object under `prefix` ending in `suffix`; bad ones go to `unreadable`."""
    keys = (info.key for info in store.list(prefix) if info.key.endswith(suffix))

    def read(key: str) -> tuple[str, Any]:
        try:
            return key, parse(store.read_bytes(key))
        except Exception as exc:  # one bad object must not hide the rest
            return key, exc

    for key, value in ordered_map(read, keys, workers=workers):
        if isinstance(value, Exception):
            unreadable.append(f"{store.uri_for(key)}: {value}")
        else:
            yield value


# --------------------------------------------------------------------------- text


def format_stats(stats: WorkspaceStats, *, max_failures: int = 20) -> str:
    """The human-readable report `pagegate stats` prints."""
    lines = [
        f"workspace: {stats.workspace}",
        f"done:      {stats.done_pdfs:,} PDFs, {stats.done_pages:,} pages "
        f"({stats.fallback_pages:,} fallback), tokens in {stats.input_tokens:,} / "
        f"out {stats.output_tokens:,}",
        f"failed:    {stats.failed_pdfs:,} PDFs",
    ]
    for reason, count in stats.failed_by_reason.items():
        lines.append(f"  {reason}: {count:,}")
        shown = [f for f in stats.failures if f["reason"] == reason][:max_failures]
        lines += [f"    {f['source']}: {f['detail']}" for f in shown]
        if count > len(shown):
            lines.append(f"    ... {count - len(shown):,} more (--json lists all)")
    if stats.flagged_pdfs:
        lines.append(
            f"flagged:   {stats.flagged_pdfs:,} committed PDFs over the fallback page rate "
            "(page_error_rate; `reprocess` can redo them)"
        )
    rem = stats.remaining
    if rem is None:
        lines.append("remaining: unknown (no run plan in runs/; pass --source to list the input)")
    else:
        basis = "listed now" if rem.basis == "sources" else "from the recorded run plans"
        approx = "~" if rem.pages_estimated else ""
        line = (f"remaining: {rem.pdfs:,} of {rem.planned_pdfs:,} PDFs {basis}, "
                f"{approx}{rem.pages:,} pages")
        if rem.seconds is not None and rem.pages > 0:
            line += f", about {format_duration(rem.seconds)} at the last run's rate"
        lines.append(line)
    last = stats.last_run
    if last:
        lines.append(
            f"last run:  {last.get('run_id')} finished {last.get('finished_at')}: "
            f"{last.get('pdfs_ok')} ok, {last.get('pdfs_failed')} failed, "
            f"{last.get('pages')} pages, {last.get('pages_per_second')} pages/s"
            + (f"; chart {last['chart']}" if last.get("chart") else "")
        )
    lines.append(f"runs:      {stats.runs}")
    if stats.unreadable:
        lines.append(f"unreadable objects: {len(stats.unreadable)}")
        lines += [f"  {u}" for u in stats.unreadable[:max_failures]]
    return "\n".join(lines) + "\n"
