"""What a run reports when it ends: the summary data, its messages, the markdown, the table.

Pure: the flow gathers the group outcomes and hands them here once; the CLI prints the
summary dict (`pagegate run --json`), the flow returns it as its final state's data and
makes the artifacts from the markdown and the table rows.
"""

from __future__ import annotations

import base64
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

    def fallback_alarm(self, max_share: float) -> str | None:
        """The line that leads the summary when the model did not really read this run.

        A misspelt model name or a broken server makes every page fall back to its text
        layer; the PDFs are all "done", so without this the run looked fine.
        """
        pages, fallback = self.totals.pages, self.totals.fallback_pages
        if pages == 0 or fallback / pages <= max_share:
            return None
        return (
            f"{fallback} of {pages} pages fell back to the text layer (more than "
            f"{max_share:.0%}): the model did not read them; check the server's log and "
            "--model (--max-fallback-share sets the limit)"
        )

    def as_dict(self) -> dict[str, Any]:
        """The flow's result and `pagegate run --json`'s output."""
        t = self.totals
        return {
            "pdfs_ok": t.pdfs_ok,
            "pdfs_ok_by_others": t.others_ok,
            "other_runs": list(t.others),
            "pdfs_failed": t.pdfs_failed,
            "pdfs_skipped": t.pdfs_skipped + self.already_done,
            "pdfs_stopped": t.pdfs_stopped,
            "pages": t.pages,
            "fallback_pages": t.fallback_pages,
            "input_tokens": t.input_tokens,
            "output_tokens": t.output_tokens,
            "elapsed_seconds": round(self.elapsed_seconds, 3),
            "chart": self.chart_uri,
            "failed": [_row(f) for f in t.failures],
            "flagged": [_row(p) for p in self.flagged],
        }

    def headline(self) -> str:
        """The summary artifact's one-line description."""
        return summary_headline(self.totals, elapsed_seconds=self.elapsed_seconds,
                                already_done=self.already_done)

    def message(self) -> str:
        """The final state's message: which PDFs failed, or what was done."""
        failures = self.totals.failures
        if failures:
            return f"{len(failures)} PDF(s) failed: {named([f.uri for f in failures])}"
        t = self.totals
        share = f" (this run {t.this_run_ok}, others {t.others_ok})" if t.others_ok else ""
        return f"{t.pdfs_ok} PDF(s) done{share}, {t.pages} pages"

    def flagged_message(self) -> str | None:
        """A warning naming the documents committed with flagged fallback pages, if any."""
        if not self.flagged:
            return None
        return (
            f"{len(self.flagged)} PDF(s) committed with fallback pages flagged "
            f"(ledger: page_error_rate): {named([p.uri for p in self.flagged])}"
        )


WORKSPACE_KEY = "workspace_error"  # the summary's key for that line


def workspace_stopped_line(workspace: str, error: BaseException, totals: RunTotals) -> str:
    """The one line of a run whose workspace stopped taking writes: where, why, what was
    kept, and what to do (the CLI prints it; a deployment's final state carries it)."""
    return (
        f"the workspace {workspace} stopped taking writes ({error}); "
        f"{totals.pdfs_ok} documents committed, {totals.pdfs_stopped} PDFs not done: "
        "free space or fix access, then rerun the same command"
    )


def _row(pdf: PdfOutcome) -> dict[str, Any]:
    return {"source": pdf.uri, "reason": pdf.reason, "detail": pdf.detail}


def failure_rows(failures: Sequence[PdfOutcome]) -> list[dict[str, str]]:
    return [
        {"source": f.uri, "reason": f.reason or "", "detail": (f.detail or "")[:300]}
        for f in failures
    ]


CHART_INLINE_MAX_BYTES = 512 * 1024  # a larger PNG is linked, not inlined (artifact size)


def summary_headline(totals: RunTotals, *, elapsed_seconds: float, already_done: int = 0) -> str:
    """One line for the summary artifact's description (its card in the run's Artifacts tab)."""
    skipped = totals.pdfs_skipped + already_done
    parts = [f"{totals.pdfs_ok} PDF(s) done", f"{totals.pdfs_failed} failed"]
    if skipped:
        parts.append(f"{skipped} skipped")
    return f"{', '.join(parts)}; {totals.pages} pages in {elapsed_seconds:.1f} s"


def chart_markdown(
    *, chart_uri: str | None, chart_link: str | None = None, chart_png: bytes | None = None
) -> list[str]:
    """The run chart section: the PNG inlined as a data: URI, and where it is kept.

    Prefect's UI (both the classic and the v2 UI of Prefect 3.9) renders markdown
    images with data: URIs, so the chart shows on the artifact page whatever the
    workspace; a link to a local path would be dead there (the browser resolves it on
    the operator's machine, or refuses file: URLs). An S3 chart also gets its
    presigned link (`chart_link`).
    """
    if not (chart_uri or chart_png):
        return []
    lines = ["", "## run chart", "", "Server waiting queue, pages in flight and gate releases; "
             "below, pages OCR'd."]
    if chart_png and len(chart_png) <= CHART_INLINE_MAX_BYTES:
        data = base64.b64encode(chart_png).decode("ascii")
        lines += ["", f"![run chart](data:image/png;base64,{data})"]
    if chart_uri:
        lines += ["", f"Kept in the workspace: `{chart_uri}`"]
        if chart_link and chart_link.startswith(("https://", "http://")):
            lines += ["", f"[Open the chart]({chart_link}) (a presigned link, valid 7 days)"]
    return lines


def summary_markdown(
    totals: RunTotals,
    *,
    elapsed_seconds: float,
    gate: Mapping[str, Any] | None = None,
    chart_uri: str | None = None,
    chart_link: str | None = None,
    chart_png: bytes | None = None,
    already_done: int = 0,
) -> str:
    """The run summary artifact's markdown (its title is the artifact's key and description).

    `chart_png` is inlined; `chart_uri` says where the chart is kept and `chart_link`
    (an https URL) opens it. Every table has a header row: Prefect's UI draws an empty
    one as a blank bar.
    """
    rate = totals.pages / elapsed_seconds if elapsed_seconds > 0 else 0.0
    tok_rate = totals.output_tokens / elapsed_seconds if elapsed_seconds > 0 else 0.0
    all_tok_rate = (totals.input_tokens + totals.output_tokens) / elapsed_seconds if elapsed_seconds > 0 else 0.0
    lines = [
        "| run | total |",
        "|---|---|",
        f"| PDFs done | {totals.pdfs_ok} |",
        *([f"| of them by other runs | {totals.others_ok} ({', '.join(totals.others)}) |"]
          if totals.others else []),
        f"| PDFs failed | {totals.pdfs_failed} |",
        f"| PDFs skipped (already committed) | {totals.pdfs_skipped + already_done} |",
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
    if totals.failures:
        lines += ["", "## failed PDFs", "", "| source | reason |", "|---|---|"]
        lines += [f"| {f.uri} | {f.reason} |" for f in totals.failures[:100]]
    lines += chart_markdown(chart_uri=chart_uri, chart_link=chart_link, chart_png=chart_png)
    if gate:
        lines += ["", "## admission", "", "| gate state | value |", "|---|---|"]
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
    return "\n".join(lines) + "\n"
