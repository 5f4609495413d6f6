"""Peak memory of the page pipeline: flat however many pages a group or a PDF has.

`python -m bench.memory` runs each scenario in a fresh process (so `ru_maxrss`, the
process's peak resident set, belongs to that scenario alone) and prints a table:

- baseline:   the run's live objects (HTTP client, renderer thread, workspace), no pages;
- group:      one group of many PDFs, every PDF of the group started at once;
- big-pdf:    one PDF of 5,000 pages (every page task created up front);
- huge-page:  one 200 x 200 inch page, inspected and rendered under the pixel cap;
- eager:      the counterfactual: N pages rendered up front and held, as a pipeline
              that renders a whole group before queueing it would hold them.

Pages go through the production path (`process_group` -> `process_pdf` -> `PageOcr`:
admission, render, request, parse, commit) against the simulator at a high time scale,
with a fixed in-flight cap, so a page is rendered only when its slot is granted.
These are figures, not assertions: read them, compare runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from pagegate import samples
from pagegate.admission.base import FixedLimit
from pagegate.config import RunConfig
from pagegate.ocr.job import process_group
from pagegate.ocr.run import open_run_context
from pagegate.pdf.reader import inspect_pdf, render_page_png
from pagegate.plan.groups import Group
from pagegate.sim.process import SimProcess

SCENARIOS = ("baseline", "group", "big-pdf", "huge-page", "eager")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


async def _ocr(uris: list[str], workspace: Path, server: str, in_flight: int) -> dict[str, Any]:
    config = RunConfig(sources=tuple(uris) or ("none",), workspace=str(workspace), server_url=server,
                       max_concurrent_requests=in_flight, use_gate=False)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with (
        httpx.AsyncClient(limits=limits) as http,
        open_run_context(config, FixedLimit(in_flight), http=http) as ctx,
    ):
        if not uris:
            return {"pages": 0}
        started = time.monotonic()
        outcome = await process_group(ctx, Group("bench", tuple(uris), 0))
        elapsed = time.monotonic() - started
    failed = [p.reason for p in outcome.pdfs if p.status != "ok"]
    pages = sum(p.pages for p in outcome.pdfs)
    return {"pages": pages, "failed": failed, "seconds": round(elapsed, 1),
            "pages_per_s": round(pages / elapsed, 1) if elapsed else 0.0}


def run_scenario(name: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One scenario in this process; returns its figures."""
    uris: list[str] = []
    if name == "group":
        for i in range(args.group_pdfs):
            path = tmp / f"g{i:04d}.pdf"
            path.write_bytes(samples.text_pdf(args.group_pages_per_pdf, title=f"G{i}", seed=i))
            uris.append(str(path))
    elif name == "big-pdf":
        path = tmp / "big.pdf"
        path.write_bytes(samples.text_pdf(args.big_pages, title="Big"))
        uris.append(str(path))
    elif name == "huge-page":
        data = samples.huge_page_pdf()
        inspect_pdf(data)
        image = render_page_png(data, 0)
        return {"pages": 1, "image": f"{image.width}x{image.height}", "png_kb": len(image.png) // 1024}
    elif name == "eager":
        data = samples.text_pdf(args.eager_pages, title="Eager")
        held = [render_page_png(data, i).png for i in range(args.eager_pages)]
        return {"pages": len(held), "held_mb": round(sum(map(len, held)) / 2**20, 1)}
    if name == "baseline":
        return asyncio.run(_ocr([], tmp / "ws", "http://127.0.0.1:9/v1", args.in_flight))
    with SimProcess(profile="ci", extra_args=("--time-scale", str(args.time_scale))) as sim:
        return asyncio.run(_ocr(uris, tmp / "ws", sim.base_url, args.in_flight))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__.split("\n")[0])
    p.add_argument("--scenario", choices=SCENARIOS, help="run one scenario here (internal)")
    p.add_argument("--group-pdfs", type=int, default=100)
    p.add_argument("--group-pages-per-pdf", type=int, default=10)
    p.add_argument("--big-pages", type=int, default=5000)
    p.add_argument("--eager-pages", type=int, default=200)
    p.add_argument("--in-flight", type=int, default=32, help="pages in flight (fixed cap)")
    p.add_argument("--time-scale", type=float, default=50.0, help="simulator speed-up")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.scenario:
        with tempfile.TemporaryDirectory(prefix="pagegate-mem-") as tmp:
            figures = run_scenario(args.scenario, args, Path(tmp))
        print(json.dumps({"scenario": args.scenario, "peak_rss_mb": round(peak_rss_mb(), 1),
                          **figures}))
        return 0
    passthrough = list(argv if argv is not None else sys.argv[1:])
    print(f"{'scenario':<10} {'peak RSS MB':>11}  details")
    for name in SCENARIOS:
        proc = subprocess.run([sys.executable, "-m", "bench.memory", "--scenario", name, *passthrough],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{name:<10} {'failed':>11}  {proc.stderr.strip()[-300:]}")
            continue
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        details = {k: v for k, v in row.items() if k not in ("scenario", "peak_rss_mb")}
        print(f"{name:<10} {row['peak_rss_mb']:>11.1f}  {details}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
