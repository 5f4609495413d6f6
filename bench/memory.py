"""Peak memory of the page pipeline: flat however many pages a group or a PDF has.

`python -m bench.memory` runs each scenario in a fresh process (so `ru_maxrss`, the
process's peak resident set, belongs to that scenario alone) and prints a table:

- baseline:   the run's live objects (HTTP client, render pool, workspace), no pages;
- group:      one group of many PDFs, every PDF of the group started at once;
- big-pdf:    one PDF of 5,000 pages (every page task created up front);
- huge-page:  one 200 x 200 inch page, inspected and rendered under the pixel cap;
- eager:      the counterfactual: N pages rendered up front and held, as a pipeline
              that renders a whole group before queueing it would hold them;
- run:        a whole run: `--run-pdfs` PDFs (`--drop small`: 13 KB and 1.5 pages on
              average; `--drop mixed`: 50 KB and 1.3 pages), cut into groups of `--pages-per-group`,
              `--run-workers` groups at once (as the flow runs them), PDF bytes capped by
              `--budget-mb`; the table runs it at 20 and 5 workers with the default budget,
              and at 20 workers with a 16 MB one;
- scans:      one group of `--scan-pdfs` scan-like PDFs (10 noisy JPEG pages each, ~8 MB).

`--tree N` measures instead a whole `pagegate run` as a user starts it, on N real-world-like
PDFs (bench.realworld: 300 dpi scans, thousands of small objects, deep page trees, many
pages, embedded fonts, broken xref tables), against the simulator, with Prefect's
temporary server: the peak RSS of the run process, of each render and counting worker,
of the Prefect server, and of the whole tree at once (bench.proctree samples /proc; the
simulator stands in for vLLM and is not counted).

Peak RSS is the run's own process (`ru_maxrss`); the render workers are processes of
their own, reported beside it (`worker_peak_mb`, the largest; there are `render_workers`
of them, default one per core).

Pages go through the production path (`process_group` -> `process_pdf` -> `PageOcr`:
admission, render, request, parse, commit) against the simulator at a high time scale,
with a fixed in-flight cap, so a page is rendered only when its slot is granted.
These are figures, not assertions: read them, compare runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.proctree import TreeSampler
from bench.realworld import noise_scan, write_drop
from bench.render import realistic_pdf
from pagegate import samples
from pagegate.admission.base import FixedLimit
from pagegate.config import RunConfig
from pagegate.ocr.job import process_group
from pagegate.ocr.outcomes import GroupOutcome
from pagegate.ocr.run import open_run_context
from pagegate.pdf.reader import inspect_pdf, render_page_png
from pagegate.plan.groups import Group, PlannedPdf, iter_groups
from pagegate.sim.process import SimProcess

SCENARIOS = ("baseline", "group", "big-pdf", "huge-page", "eager", "run", "scans")
RUNS = (("run", ("--run-workers", "20")), ("run", ("--run-workers", "5")),
        ("run", ("--run-workers", "20", "--budget-mb", "16")), ("scans", ()))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


async def _ocr(uris: list[str], workspace: Path, server: str, in_flight: int, *,
               groups: list[Group] | None = None, workers: int = 1,
               budget_mb: int = RunConfig.pdf_memory_budget_mb) -> dict[str, Any]:
    config = RunConfig(sources=tuple(uris) or ("none",), workspace=str(workspace), server_url=server,
                       max_concurrent_requests=in_flight, use_gate=False,
                       pdf_memory_budget_mb=budget_mb)
    groups = groups or [Group("bench", tuple(uris), 0)]
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with (
        httpx.AsyncClient(limits=limits) as http,
        open_run_context(config, FixedLimit(in_flight), http=http) as ctx,
    ):
        if not uris:
            return {"pages": 0}
        running = asyncio.Semaphore(workers)  # groups at once, as flows/ocr_pdfs.py runs them

        async def one(group: Group) -> GroupOutcome:
            async with running:
                return await process_group(ctx, group)

        started = time.monotonic()
        outcomes = await asyncio.gather(*(one(g) for g in groups))
        elapsed = time.monotonic() - started
        worker_peak = max(await ctx.renderer.worker_peaks_kb()) / 1024
        held = ctx.intake.peak_held_bytes / 2**20
    pdfs = [p for o in outcomes for p in o.pdfs]
    failed = [p.reason for p in pdfs if p.status != "ok"]
    pages = sum(p.pages for p in pdfs)
    return {"pdfs": len(pdfs), "pages": pages, "failed": failed[:5], "groups": len(groups),
            "workers": workers, "budget_mb": budget_mb, "peak_held_mb": round(held, 1),
            "worker_peak_mb": round(worker_peak, 1), "seconds": round(elapsed, 1),
            "pages_per_s": round(pages / elapsed, 1) if elapsed else 0.0}


def _drop(tmp: Path, count: int, kind: str = "small") -> list[str]:
    """`count` PDFs cycling through 30 distinct ones: "small" (text, figures, scans; 13 KB
    and 1.5 pages on average) or "mixed" (text, scans and two-page reports with a photo:
    50 KB and 1.3 pages, nearer a real-world drop's 90 KB)."""
    if kind == "mixed":
        kinds = [samples.text_pdf(1, title=f"T{i}", seed=i) for i in range(10)]
        kinds += [samples.scanned_pdf(1, seed=i) for i in range(10)]
        kinds += [realistic_pdf("report", 2, i) for i in range(10)]
    else:
        kinds = [samples.text_pdf(1 + i % 3, title=f"T{i}", seed=i) for i in range(10)]
        kinds += [samples.image_pdf(1 + i % 2, seed=i) for i in range(10)]
        kinds += [samples.scanned_pdf(1, seed=i) for i in range(10)]
    uris = []
    for n in range(count):
        path = tmp / f"r{n:05d}.pdf"
        path.write_bytes(kinds[n % len(kinds)])
        uris.append(str(path))
    return uris


def _scan_pdf(pages: int) -> bytes:
    """Scanner output: each page a noisy light-grey 8.5 x 11 in JPEG at 200 dpi (~0.8 MB)."""
    return noise_scan(pages, dpi=200, quality=80, lift=110, seed=12)


def write_scan(path: str) -> None:
    """Run in a child process: making the scan takes far more memory than reading it."""
    Path(path).write_bytes(_scan_pdf(10))


def run_tree(count: int, pages_per_group: int, time_scale: float,
             extra: list[str]) -> dict[str, Any]:
    """One `pagegate run` over `count` generated PDFs, its process tree sampled."""
    with tempfile.TemporaryDirectory(prefix="pagegate-tree-") as tmp:
        root = Path(tmp)
        kinds = write_drop(root / "in", count)
        env = {**os.environ, "PREFECT_HOME": str(root / "prefect"),
               "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
        env.pop("PREFECT_API_URL", None)  # Prefect starts its temporary server
        command = [sys.executable, "-m", "pagegate.cli", "run", str(root / "in"),
                   "--workspace", str(root / "ws"), "--pages-per-group", str(pages_per_group),
                   "--json", *extra]
        with SimProcess(profile="ci", extra_args=("--time-scale", str(time_scale))) as sim:
            started = time.monotonic()
            with (open(root / "log", "wb") as log,
                  subprocess.Popen([*command, "--server", sim.base_url], env=env,
                                   stdout=subprocess.PIPE, stderr=log) as proc,
                  TreeSampler(proc.pid) as sampler):
                out, _ = proc.communicate()
            seconds = time.monotonic() - started
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"pagegate run exited {proc.returncode}: "
                               f"{(root / 'log').read_text()[-2000:]}")
        text = out.decode()
        summary = json.loads(text[text.index("{"):])
    peaks = sampler.result.by_role()
    return {"pdfs": count, "kinds": kinds, "pdfs_ok": summary.get("pdfs_ok"),
            "pdfs_failed": summary.get("pdfs_failed"), "pages": summary.get("pages"),
            "seconds": round(seconds), "run_mb": max(peaks.get("run", [0.0])),
            "render_worker_mb": peaks.get("render worker", []),
            "count_worker_mb": max(peaks.get("count worker", [0.0])),
            "count_workers": len(peaks.get("count worker", [])),
            "prefect_server_mb": peaks.get("prefect server", []),
            "other_mb": peaks.get("other", []),
            "tree_mb": round(sampler.result.tree_peak_kb / 1024, 1)}


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
    elif name == "run":
        uris = _drop(tmp, args.run_pdfs, args.drop)
        planned = [PlannedPdf(u, inspect_pdf(Path(u)).page_count) for u in uris]
        groups = list(iter_groups(planned, args.pages_per_group))
        with SimProcess(profile="ci", extra_args=("--time-scale", str(args.time_scale))) as sim:
            return asyncio.run(_ocr(uris, tmp / "ws", sim.base_url, args.in_flight, groups=groups,
                                    workers=args.run_workers, budget_mb=args.budget_mb))
    elif name == "scans":
        first = tmp / "scan000.pdf"
        subprocess.run([sys.executable, "-c", f"from bench.memory import write_scan; "
                        f"write_scan({str(first)!r})"], check=True)
        scan = first.read_bytes()
        for i in range(args.scan_pdfs):
            path = tmp / f"scan{i:03d}.pdf"
            path.write_bytes(scan)
            uris.append(str(path))
        del scan
    if name == "baseline":
        return asyncio.run(_ocr([], tmp / "ws", "http://127.0.0.1:9/v1", args.in_flight))
    with SimProcess(profile="ci", extra_args=("--time-scale", str(args.time_scale))) as sim:
        return asyncio.run(_ocr(uris, tmp / "ws", sim.base_url, args.in_flight,
                                budget_mb=args.budget_mb))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__.split("\n")[0])
    p.add_argument("--scenario", choices=SCENARIOS, help="run one scenario here (internal)")
    p.add_argument("--group-pdfs", type=int, default=100)
    p.add_argument("--group-pages-per-pdf", type=int, default=10)
    p.add_argument("--big-pages", type=int, default=5000)
    p.add_argument("--eager-pages", type=int, default=200)
    p.add_argument("--in-flight", type=int, default=32, help="pages in flight (fixed cap)")
    p.add_argument("--time-scale", type=float, default=50.0, help="simulator speed-up")
    p.add_argument("--run-pdfs", type=int, default=3000)
    p.add_argument("--run-workers", type=int, default=20, help="groups at once (--workers)")
    p.add_argument("--pages-per-group", type=int, default=100)
    p.add_argument("--budget-mb", type=int, default=RunConfig.pdf_memory_budget_mb)
    p.add_argument("--scan-pdfs", type=int, default=40)
    p.add_argument("--drop", choices=("small", "mixed"), default="small",
                   help="the run's PDFs (see _drop)")
    p.add_argument("--tree", type=int, metavar="N",
                   help="measure a whole `pagegate run` over N real-world-like PDFs")
    p.add_argument("--tree-arg", action="append", default=[],
                   help="an extra `pagegate run` argument for --tree (repeatable)")
    p.add_argument("--only", choices=SCENARIOS, nargs="+", help="run just these scenarios")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.tree:
        row = run_tree(args.tree, args.pages_per_group, args.time_scale, args.tree_arg)
        print(json.dumps(row))
        return 0
    if args.scenario:
        with tempfile.TemporaryDirectory(prefix="pagegate-mem-") as tmp:
            figures = run_scenario(args.scenario, args, Path(tmp))
        print(json.dumps({"scenario": args.scenario, "peak_rss_mb": round(peak_rss_mb(), 1),
                          **figures}))
        return 0
    passthrough = list(argv if argv is not None else sys.argv[1:])
    if "--only" in passthrough:
        passthrough = passthrough[: passthrough.index("--only")]
    runs = [(n, ()) for n in SCENARIOS if n not in ("run", "scans")] + list(RUNS)
    runs = [(n, extra) for n, extra in runs if not args.only or n in args.only]
    print(f"{'scenario':<10} {'peak RSS MB':>11}  details")
    for name, extra in runs:
        proc = subprocess.run([sys.executable, "-m", "bench.memory", "--scenario", name,
                               *passthrough, *extra], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{name:<10} {'failed':>11}  {proc.stderr.strip()[-300:]}")
            continue
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        details = {k: v for k, v in row.items() if k not in ("scenario", "peak_rss_mb")}
        print(f"{name:<10} {row['peak_rss_mb']:>11.1f}  {details}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
