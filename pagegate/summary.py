"""Human-readable run summaries (markdown and table rows) from plain totals."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pagegate.outcomes import PdfOutcome, RunTotals


def failure_rows(failures: Sequence[PdfOutcome]) -> list[dict[str, str]]:
    return [
        {"source": f.uri, "reason": f.reason or "", "detail": (f.detail or "")[:300]}
        for f in failures
    ]


def summary_markdown(
    totals: RunTotals, *, elapsed_seconds: float, gate: Mapping[str, Any] | None = None
) -> str:
    rate = totals.pages / elapsed_seconds if elapsed_seconds > 0 else 0.0
    tok_rate = totals.output_tokens / elapsed_seconds if elapsed_seconds > 0 else 0.0
    lines = [
        "# pagegate run summary",
        "",
        "| | |",
        "|---|---|",
        f"| PDFs done | {totals.pdfs_ok} |",
        f"| PDFs failed | {totals.pdfs_failed} |",
        f"| PDFs skipped (already committed) | {totals.pdfs_skipped} |",
        f"| pages | {totals.pages} |",
        f"| fallback pages | {totals.fallback_pages} |",
        f"| tokens in / out | {totals.input_tokens} / {totals.output_tokens} |",
        f"| elapsed | {elapsed_seconds:.1f} s |",
        f"| pages/s | {rate:.2f} |",
        f"| output tokens/s | {tok_rate:.0f} |",
    ]
    if gate:
        lines += ["", "## admission", "", "| | |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in gate.items() if not isinstance(v, (dict, list))]
    if totals.failures:
        lines += ["", "## failed PDFs", "", "| source | reason |", "|---|---|"]
        lines += [f"| {f.uri} | {f.reason} |" for f in totals.failures[:100]]
    return "\n".join(lines) + "\n"
