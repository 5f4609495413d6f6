"""The `pagegate` command line: run, sim, demo.

Prefect is imported only by the commands that run flows, so `pagegate sim` and
`--help` stay quick.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any, cast

import typer

from pagegate.sim.command import sim_command

app = typer.Typer(
    name="pagegate",
    help="OCR large PDF collections through a vision-language model on vLLM, behind an admission gate.",
    no_args_is_help=True,
    add_completion=False,
)
app.command("sim", help="Serve the vLLM-compatible simulator (OpenAI API + /metrics).")(sim_command)


def _prefect_env() -> None:
    """Send pagegate's own loggers to the Prefect run log; keep telemetry off by default.

    pypdf warns about every repair it makes on a damaged file; the failure ledger already
    records what matters, so only its errors reach the log.
    """
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "pagegate")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    logging.getLogger("pypdf").setLevel(logging.ERROR)


def _gate_overrides(
    peak_ratio: float | None, cooldown: float | None, max_in_flight: int | None
) -> dict[str, Any]:
    pairs = {
        "peak_ratio": peak_ratio,
        "cooldown_seconds": cooldown,
        "max_in_flight_pages": max_in_flight,
    }
    return {k: v for k, v in pairs.items() if v is not None}


def run_flow(**params: Any) -> tuple[bool, dict[str, Any]]:
    """Run the ocr-pdfs flow as a real Prefect flow run; (completed?, summary)."""
    _prefect_env()
    from flows.ocr_pdfs import ocr_pdfs

    coro = cast(Coroutine[Any, Any, Any], ocr_pdfs(**params, return_state=True))
    state = asyncio.run(coro)
    data = state.result(raise_on_failure=False)
    if asyncio.iscoroutine(data):
        data = asyncio.run(data)
    summary = data if isinstance(data, dict) else {"message": state.message}
    return bool(state.is_completed()), summary


@app.command()
def run(
    sources: Annotated[list[str], typer.Argument(help="s3://bucket/prefix, globs, folders, files, or .txt lists.")],
    workspace: Annotated[str, typer.Option(help="Output location: local folder or s3://bucket/prefix.")],
    server: Annotated[str, typer.Option(help="OpenAI base URL of the vLLM server.")] = "http://127.0.0.1:8000/v1",
    model: Annotated[str, typer.Option(help="Served model name sent with each request.")] = "olmocr",
    pages_per_group: Annotated[int, typer.Option(help="Target pages per group task.")] = 500,
    workers: Annotated[int, typer.Option(help="Group tasks at once.")] = 20,
    max_concurrent_requests: Annotated[int, typer.Option(help="Requests in flight when the gate is off.")] = 1600,
    markdown: Annotated[bool, typer.Option("--markdown", help="Also write one .md per PDF.")] = False,
    target_longest_image_dim: Annotated[int, typer.Option(help="Rendered page size (longest side, px).")] = 1288,
    max_page_retries: Annotated[int, typer.Option(help="Model attempts per page before text fallback.")] = 8,
    gate: Annotated[str | None, typer.Option(help="Name of a saved AdmissionGate block.")] = None,
    no_gate: Annotated[bool, typer.Option("--no-gate", help="Disable the gate; cap requests only.")] = False,
    gate_peak_ratio: Annotated[float | None, typer.Option(help="Release only when waiting <= ratio x peak.")] = None,
    gate_cooldown: Annotated[float | None, typer.Option(help="Seconds between releases.")] = None,
    gate_max_in_flight: Annotated[int | None, typer.Option(help="Hard cap on pages in flight.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
) -> None:
    """OCR PDFs into Dolma JSONL as a Prefect flow run; exits 1 if any PDF failed."""
    ok, summary = run_flow(
        sources=list(sources),
        workspace=workspace,
        server_url=server,
        model=model,
        pages_per_group=pages_per_group,
        workers=workers,
        max_concurrent_requests=max_concurrent_requests,
        markdown=markdown,
        target_longest_image_dim=target_longest_image_dim,
        max_page_retries=max_page_retries,
        gate=gate,
        gate_enabled=not no_gate,
        gate_overrides=_gate_overrides(gate_peak_ratio, gate_cooldown, gate_max_in_flight),
    )
    _print_summary(summary, workspace, json_out=json_out)
    raise typer.Exit(0 if ok else 1)


def _print_summary(summary: dict[str, Any], workspace: str, *, json_out: bool) -> None:
    if json_out:
        typer.echo(json.dumps(summary, indent=2))
        return
    elapsed = float(summary.get("elapsed_seconds") or 0.0)
    pages = int(summary.get("pages") or 0)
    rate = pages / elapsed if elapsed > 0 else 0.0
    typer.echo(
        f"PDFs ok: {summary.get('pdfs_ok', 0)}  failed: {summary.get('pdfs_failed', 0)}  "
        f"skipped: {summary.get('pdfs_skipped', 0)}  pages: {pages}  "
        f"fallback pages: {summary.get('fallback_pages', 0)}  {rate:.2f} pages/s"
    )
    for failure in summary.get("failed", []):
        typer.echo(f"  FAILED {failure['source']}: {failure['reason']} ({failure['detail']})")
    typer.echo(f"results: {workspace.rstrip('/')}/results/  ledger: {workspace.rstrip('/')}/ledger/")


@app.command()
def demo(
    directory: Annotated[Path, typer.Option("--dir", help="Where to put sample PDFs and the workspace.")] = Path("pagegate-demo"),
    pdfs: Annotated[int, typer.Option(help="Good sample PDFs to generate (7 broken ones are added).")] = 16,
) -> None:
    """Generate sample PDFs, start the simulator, and OCR them on embedded defaults."""
    from pagegate.demo import run_demo

    raise typer.Exit(run_demo(directory.resolve(), good=pdfs, run=run_flow))


if __name__ == "__main__":
    app()
