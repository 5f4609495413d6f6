"""Which PDFs a `reprocess` run takes from a workspace's failure ledger.

A ledger record means "this PDF has no usable result", with one exception: a
`page_error_rate` record sits beside a committed, flagged document (kept unless the
run was told to drop it), and reprocessing it means redoing that document. Any other
record whose PDF is committed is stale (an overlapping run finished the PDF between
our failure and our ledger write) and is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from pagegate.output.ledger import REASONS, FailureRecord

FLAGGED_REASON = "page_error_rate"
"""The one reason whose PDFs have a committed (flagged) document."""


def check_reasons(reasons: Collection[str]) -> frozenset[str]:
    """The reasons as a set; an unknown one is an error, not a filter that matches nothing."""
    unknown = sorted(set(reasons) - REASONS)
    if unknown:
        raise ValueError(f"unknown ledger reason(s) {', '.join(unknown)}; known: {', '.join(sorted(REASONS))}")
    return frozenset(reasons)


def select_for_reprocess(
    records: Iterable[FailureRecord],
    *,
    only_reasons: Collection[str] | None,
    is_committed: Callable[[str], bool],
) -> list[str]:
    """Sources to redo, sorted: records matching `only_reasons` (None: all), stale ones dropped."""
    wanted = check_reasons(only_reasons) if only_reasons else None
    chosen: set[str] = set()
    for record in records:
        if wanted is not None and record.reason not in wanted:
            continue
        if record.reason != FLAGGED_REASON and is_committed(record.source):
            continue
        chosen.add(record.source)
    return sorted(chosen)
