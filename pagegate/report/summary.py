"""What a run reports when it ends: the summary data, its messages, the markdown, the table.

Pure: the flow gathers the group outcomes and hands them here once; the CLI prints the
summary dict (`pagegate run --json`), the flow returns it as its final state's data and
makes the artifacts from the markdown and the table rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pagegate.ocr.outcomes import GroupOutcome, PdfOutcome, RunTotals

SHOWN = 20  # PDFs named in one message; the rest are counted


def named(uris: Sequence[str], shown: int = SHOWN) -> str:
    """'a, b, c (+4 more)': the first `shown` names and a count of the others."""
    more = f" (+{len(uris) - shown} more)" if len(uris) > shown else ""
    return ", ".join(uris[:shown]) + more


def flagged_pdfs(outcomes: Iterable[GroupOutcome]) -> tuple[PdfOutcome, ...]:
    """Committed documents that got a page_error_rate record (done, but worth a reprocess)."""
    return tuple(p for g in outcomes for p in g.pdfs if p.status == "ok" and p.reason)


@dataclass(frozen=True)
class RunSummary:
    """A finished run's figures: totals over its groups, the flagged documents, and the
    PDFs the plan left out because they were already committed."""

    totals: RunTotals = field(default_factory=RunTotals)
    flagged: tuple[PdfOutcome, ...] = ()
    already_done: int = 0
    elapsed_seconds: float = 0.0
    chart_uri: str | None = None

    @classmethod
    def of(
        cls,
        outcomes: Sequence[GroupOutcome],
        *,
        already_done: int,
        elapsed_seconds: float,
        chart_uri: str | None = None,
    ) -> RunSummary:
        return cls(RunTotals.of(outcomes), flagged_pdfs(outcomes), already_done,
                   elapsed_seconds, chart_uri)

    @property
    def failed(self) -> bool:
        return bool(self.totals.failures)

    def as_dict(self) -> dict[str, Any]:
        """The flow's result and `pagegate run --json`'s output."""
        t = self.totals
        return {
            "pdfs_ok": t.pdfs_ok,
            "pdfs_failed": t.pdfs_failed,
            "pdfs_skipped": t.pdfs_skipped + self.already_done,
            "pages": t.pages,
            "fallback_pages": t.fallback_pages,
            "input_tokens": t.input_tokens,
            "output_tokens": t.output_tokens,
            "elapsed_seconds": round(self.elapsed_seconds, 3),
            "chart": self.chart_uri,
            "failed": [_row(f) for f in t.failures],
            "flagged": [_row(p) for p in self.flagged],
        }

    def message(self) -> str:
        """The final state's message: which PDFs failed, or what was done."""
        failures = self.totals.failures
        if failures:
            return f"{len(failures)} PDF(s) failed: {named([f.uri for f in failures])}"
        return f"{self.totals.pdfs_ok} PDF(s) done, {self.totals.pages} pages"

    def flagged_message(self) -> str | None:
        """A warning naming the documents committed with flagged fallback pages, if any."""
        if not self.flagged:
            return None
        return (
            f"{len(self.flagged)} PDF(s) committed with fallback pages flagged "
            f"(ledger: page_error_rate): {named([p.uri for p in self.flagged])}"
        )


def _row(pdf: PdfOutcome) -> dict[str, Any]:
    return {"source": pdf.uri, "reason": pdf.reason, "detail": pdf.detail}


def failure_rows(failures: Sequence[PdfOutcome]) -> list[dict[str, str]]:
    return [
        {"source": f.uri, "reason": f.reason or "", "detail": (f.detail or "")[:300]}
        for f in failures
    ]


def summary_markdown(
    totals: RunTotals,
    *,
    elapsed_seconds: float,
    gate: Mapping[str, Any] | None = None,
    chart_uri: str | None = None,
    chart_link: str | None = None,
) -> str:
    """The run summary artifact; `chart_link` (a URL) or `chart_uri` points at the run chart."""
    rate = totals.pages / elapsed_seconds if elapsed_seconds > 0 else 0.0
    tok_rate = totals.output_tokens / elapsed_seconds if elapsed_seconds > 0 else 0.0
    all_tok_rate = (totals.input_tokens + totals.output_tokens) / elapsed_seconds if elapsed_seconds > 0 else 0.0
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
        f"| tokens/s (in + out) | {all_tok_rate:.0f} |",
    ]
    if gate and "releases" in gate:
        lines.append(f"| gate releases / pauses | {gate.get('releases')} / {gate.get('pauses')} |")
    if chart_uri or chart_link:
        target = chart_link or chart_uri
        lines += ["", f"Run chart (server queue, pages in flight, gate releases): [{chart_uri or target}]({target})"]
    if gate:
        lines += ["", "## admission", "", "| | |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in gate.items() if not isinstance(v, (dict, list))]
    servers = gate.get("servers") if gate else None
    if isinstance(servers, list) and servers:
        lines += ["", "## servers", "", "| server | in rotation | pages answered | rerouted away | refusals |",
                  "|---|---|---|---|---|"]
        lines += [
            f"| {s.get('url')} | {'yes' if s.get('in_rotation') else 'no'} | {s.get('answered')} "
            f"| {s.get('rerouted')} | {s.get('refusals')} |"
            for s in servers if isinstance(s, Mapping)
        ]
    if totals.failures:
        lines += ["", "## failed PDFs", "", "| source | reason |", "|---|---|"]
        lines += [f"| {f.uri} | {f.reason} |" for f in totals.failures[:100]]
    return "\n".join(lines) + "\n"
