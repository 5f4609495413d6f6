"""Human-readable run summaries (markdown and table rows) from plain totals."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pagegate.ocr.outcomes import PdfOutcome, RunTotals


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
