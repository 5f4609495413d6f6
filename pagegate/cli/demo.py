"""`pagegate demo`: the whole pipeline on one machine, with nothing to configure.

Sample PDFs (some deliberately broken) are generated, the simulator plays the vLLM
server, Prefect runs ephemerally on SQLite, and the workspace is a local folder. The
simulator is given the sample PDFs (`pagegate sim --pdfs`), so the documents hold each
page's own text, in whichever model profile's format `--profile` names; with `--layout`
the layout sidecars show where each line is, in PDF points.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from pagegate.sim.process import SimProcess
from pagegate.vlm.profiles import PROFILES, get_profile

RunFlow = Callable[..., tuple[bool, dict[str, Any]]]


def run_demo(directory: Path, *, good: int, run: RunFlow, profile: str | None = None,
             layout: bool = False) -> int:
    """Returns the process exit code: 0 when exactly the deliberately broken PDFs failed."""
    pdf_dir = directory / "pdfs"
    workspace = directory / "workspace"
    for old in (pdf_dir, workspace):
        shutil.rmtree(old, ignore_errors=True)
    from pagegate.samples import write_sample_corpus  # reportlab, pypdf: only for the demo

    files = write_sample_corpus(pdf_dir, good=good, include_bad=True)
    print(f"pagegate demo: {len(files)} sample PDFs in {pdf_dir}")
    with SimProcess(profile="ci", extra_args=("--pdfs", str(pdf_dir))) as sim:
        print(f"pagegate demo: simulator (playing vLLM) at {sim.base_url}")
        _completed, summary = run(
            sources=[str(pdf_dir)],
            workspace=str(workspace),
            server_url=sim.base_url,
            markdown=True,
            pages_per_group=20,
            profile=profile,
            layout=layout,
        )
    failed = summary.get("failed", [])
    print(
        f"\nPDFs converted: {summary.get('pdfs_ok', 0)}, pages: {summary.get('pages', 0)}, "
        f"in {float(summary.get('elapsed_seconds') or 0):.1f} s"
    )
    print(f"PDFs recorded in the failure ledger: {len(failed)}")
    for f in failed:
        print(f"  {Path(f['source']).name}: {f['reason']}")
    print(f"\nDolma JSONL: {workspace / 'results'}")
    print(f"Markdown:    {workspace / 'markdown'}")
    print(f"Ledger:      {workspace / 'ledger'}")
    if layout:
        print(f"Layout:      {workspace / 'layout'} (a JSONL file a document: each page's "
              "blocks, boxes in PDF points)")
    expected_bad = {p.name for p in files if p.name.startswith("bad-")}
    failed_names = {Path(f["source"]).name for f in failed}
    if failed_names == expected_bad and summary.get("pdfs_ok", 0) == len(files) - len(expected_bad):
        print("\nThe broken samples failed as they should; every good PDF was converted.")
        return 0
    print("\nUnexpected outcome: see the list above.")
    return 1


def demo_command(
    directory: Annotated[Path, typer.Option("--dir", help="Where to put sample PDFs and the workspace.")] = Path("pagegate-demo"),
    pdfs: Annotated[int, typer.Option(help="Good sample PDFs to generate (7 broken ones are added).")] = 16,
    profile: Annotated[str | None, typer.Option(help=f"Model profile the simulator answers as: {', '.join(PROFILES)}.")] = None,
    layout: Annotated[bool, typer.Option("--layout", help="Write the layout sidecars (profiles that give boxes).")] = False,
) -> None:
    """Generate sample PDFs, start the simulator, and OCR them on embedded defaults."""
    from pagegate.cli.flowrun import run_flow

    try:
        if profile is not None:
            get_profile(profile)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--profile") from None
    raise typer.Exit(run_demo(directory.resolve(), good=pdfs, run=run_flow, profile=profile,
                              layout=layout))
