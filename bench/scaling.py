"""Scale-out benchmark: throughput on 1, 2 and 4 simulated nodes; planning at 100k and 1M keys.

`python -m bench.scaling nodes` (about 2 minutes)
    One workload (text PDFs on disk) is planned into shards by the planner's own code
    (pagegate.scale.plan: sample, fit, content-defined cut, manifests). Then N "nodes"
    work through the shard queue, each taking the next shard when it is free, as the
    planner's bounded launches and the pool's free workers do. A node is a simulator
    process of its own (its "GPU") and an in-process shard execution against it: the
    production shard path (`process_group`: fetch, inspect, admit, render, request,
    commit) under a fixed in-flight cap of 16 per node. Real Prefect workers would add
    about 10 s of start-up per run and two more processes per node, which 2 cores
    cannot carry four times over; the per-shard work is the same code.

    The simulators run slowed down (`--time-scale 0.1`: the ci profile's ~27 pages/s
    becomes ~2.7 pages/s per node), so a node's throughput is bound by its server, as on
    a GPU cluster, and not by this machine's 2 cores, which every node's client and
    server share here. The client's CPU use is printed to show it is not the bottleneck.

`python -m bench.scaling planning` (about 3 minutes)
    Planning time and peak memory of `plan_shards` in a fresh process, listing over
    HTTP, with a size-based estimate (no sampling) and manifests written back:
    - 100k keys from moto's S3 server (keys put straight into its backend, empty bodies);
    - 100k and 1M keys from a minimal ListObjectsV2 server below (moto's listing reads
      the whole bucket for every page of 1,000 keys, O(N) per page: 0.5 s a page at
      100k keys, which would be ~90 minutes for 1M; real S3 answers a page in ~50-100 ms).

Figures, not assertions; 2 shared cores make them noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import multiprocessing
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import httpx

from pagegate import samples
from pagegate.admission.base import FixedLimit
from pagegate.config import RunConfig
from pagegate.io.local import LocalStore
from pagegate.io.s3 import make_s3_client
from pagegate.io.storage import read_uri
from pagegate.ocr.job import process_group
from pagegate.ocr.run import open_run_context
from pagegate.pdf.reader import inspect_pdf
from pagegate.plan.groups import Group
from pagegate.scale.estimate import SizedPdf, fit_page_model, leave_one_out, sample_rank
from pagegate.scale.plan import plan_shards
from pagegate.scale.shards import manifest_uris
from pagegate.sim.process import SimProcess

IN_FLIGHT = 16


# ----------------------------------------------------------------------------- nodes


async def _node_work(queue: Any, ready: Any, server: str, ws: str, go: Any) -> dict[str, Any]:
    """One node's client: take the next shard whenever free, run it, until none is left."""
    config = RunConfig(sources=("bench",), workspace=ws, server_url=server,
                       max_concurrent_requests=IN_FLIGHT, use_gate=False)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    pages, failed = 0, []
    async with (
        httpx.AsyncClient(limits=limits) as http,
        open_run_context(config, FixedLimit(IN_FLIGHT), http=http) as ctx,
    ):
        ready.put(server)
        await asyncio.to_thread(go.wait)
        cpu0 = time.process_time()
        while (shard := await asyncio.to_thread(queue.get)) is not None:  # None: no shard left
            shard_id, uris = shard
            outcome = await process_group(ctx, Group(shard_id, tuple(uris), 0))
            pages += sum(p.pages for p in outcome.pdfs)
            failed += [p.uri for p in outcome.pdfs if p.status != "ok"]
    return {"pages": pages, "failed": failed, "cpu_s": time.process_time() - cpu0}


def _node_main(queue: Any, ready: Any, results: Any, server: str, ws: str, go: Any) -> None:
    """A node's process (spawned): pdfium is process-global and not thread-safe, so two
    nodes' renderers cannot share one process (they corrupt its heap)."""
    results.put(asyncio.run(_node_work(queue, ready, server, ws, go)))


def _run_nodes(shards: list[tuple[str, list[str]]], servers: list[str], ws: Path) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    queue, ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Queue(), ctx.Event()
    for shard in [*shards, *[None] * len(servers)]:
        queue.put(shard)
    procs = [ctx.Process(target=_node_main, args=(queue, ready, results, s, str(ws), go))
             for s in servers]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.get(timeout=120)  # every node has imported and opened its run context
    wall0 = time.monotonic()
    go.set()
    rows = [results.get(timeout=1_800) for _ in procs]
    wall = time.monotonic() - wall0
    for proc in procs:
        proc.join(timeout=30)
    pages = sum(r["pages"] for r in rows)
    return {"nodes": len(servers), "pages": pages, "seconds": round(wall, 1),
            "pages_per_s": round(pages / wall, 2), "pages_by_node": [r["pages"] for r in rows],
            "client_cpu_share": round(sum(r["cpu_s"] for r in rows) / wall, 2),
            "failed": [u for r in rows for u in r["failed"]]}


def _cpu_seconds(sim: SimProcess) -> float:
    """User + system CPU seconds of a simulator process so far (/proc/PID/stat)."""
    assert sim.process is not None
    fields = Path(f"/proc/{sim.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_nodes(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="pagegate-scale-") as tmp:
        root = Path(tmp)
        (root / "in").mkdir()
        true_pages = 0
        for i in range(args.pdfs):
            pages = 2 + (i * 7) % 5  # 2..6 pages
            true_pages += pages
            (root / "in" / f"d{i:04d}.pdf").write_bytes(samples.text_pdf(pages, title=f"D{i}", seed=i))
        started = time.monotonic()
        plan = plan_shards([str(root / "in")], workspace=LocalStore(root / "plan"),
                           target_pages=args.shard_pages, target_pdfs=1_000, s3_client=None,
                           sample_size=8)
        shards = [(s.id, manifest_uris(read_uri(s.manifest).decode())) for s in plan.shards]
        error = plan.error
        print(f"workload: {args.pdfs} PDFs, {true_pages} pages; planned {len(shards)} shards "
              f"in {time.monotonic() - started:.2f} s, estimated {plan.estimated_pages} pages "
              f"({(plan.estimated_pages - true_pages) / true_pages:+.1%} vs counted; "
              f"leave-one-out on the sample of {error.pdfs if error else 0}: total "
              f"{error.total_relative_error if error else float('nan'):.1%})", flush=True)
        base = None
        rows = []
        for n in args.nodes:
            sims = [SimProcess(profile="ci", extra_args=("--time-scale", str(args.time_scale))).start()
                    for _ in range(n)]
            try:
                cpu0 = sum(_cpu_seconds(sim) for sim in sims)
                row = _run_nodes(shards, [s.base_url for s in sims], root / f"ws{n}")
                row["servers_cpu_share"] = round(
                    (sum(_cpu_seconds(sim) for sim in sims) - cpu0) / row["seconds"], 2)
            finally:
                for sim in sims:
                    sim.stop()
            base = base or row["pages_per_s"]
            row["ratio"] = round(row["pages_per_s"] / base, 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
        print("\n| nodes | pages/s | ratio to 1 node | wall s | pages per node "
              "| clients' CPU (cores) | servers' CPU (cores) |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['nodes']} | {r['pages_per_s']} | {r['ratio']} | {r['seconds']} "
                  f"| {r['pages_by_node']} | {r['client_cpu_share']} | {r['servers_cpu_share']} |")
        print(f"(load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


# ----------------------------------------------------------------------------- planning


def _size(i: int) -> int:
    """A deterministic spread of PDF sizes: 20 KB to ~2 MB."""
    h = int.from_bytes(hashlib.sha1(str(i).encode()).digest()[:4], "big")
    return 20_000 + h % 2_000_000


class ListingServer:
    """A minimal S3 endpoint: ListObjectsV2 over N synthetic keys `in/00000000.pdf` ...
    (computed per page, O(page) per request), and PUT that accepts and drops the body."""

    def __init__(self, keys: int) -> None:
        self.keys = keys
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Route

        async def bucket(request: Request) -> Response:
            q = request.query_params
            prefix = q.get("prefix", "")
            limit = int(q.get("max-keys", "1000"))
            start = int(q.get("continuation-token") or 0)
            if prefix not in ("", "in", "in/") and not prefix.startswith("in/"):
                start, end = 0, 0
            else:
                end = min(self.keys, start + limit)
            items = "".join(
                f"<Contents><Key>in/{i:08d}.pdf</Key><Size>{_size(i)}</Size>"
                f"<ETag>&quot;{i:032x}&quot;</ETag><StorageClass>STANDARD</StorageClass></Contents>"
                for i in range(start, end)
            )
            more = end < self.keys and end > start
            body = (
                '<?xml version="1.0" encoding="UTF-8"?>'
                '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                f"<Name>{escape(request.path_params['bucket'])}</Name><Prefix>{escape(prefix)}</Prefix>"
                f"<KeyCount>{end - start}</KeyCount><MaxKeys>{limit}</MaxKeys>"
                f"<IsTruncated>{'true' if more else 'false'}</IsTruncated>"
                + (f"<NextContinuationToken>{end}</NextContinuationToken>" if more else "")
                + items + "</ListBucketResult>"
            )
            return Response(body, media_type="application/xml")

        async def put(request: Request) -> Response:
            await request.body()
            return Response(b"", headers={"ETag": '"0"'})

        return Starlette(routes=[Route("/{bucket}", bucket, methods=["GET"]),
                                 Route("/{bucket}/{key:path}", put, methods=["PUT"])])

    def __enter__(self) -> ListingServer:
        import uvicorn

        config = uvicorn.Config(self.app(), host="127.0.0.1", port=self.port, log_level="error")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        while not self._server.started:
            time.sleep(0.05)  # polling for readiness
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


def _moto(keys: int) -> tuple[Any, str]:
    """moto's server in this process, with `keys` empty objects put into its backend."""
    import boto3
    from moto.s3.models import FakeKey, s3_backends
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    client.create_bucket(Bucket="big")
    bucket = s3_backends["123456789012"]["aws"].buckets["big"]
    for i in range(keys):
        name = f"in/{i:08d}.pdf"
        bucket.keys[name] = FakeKey(name=name, value=b"", account_id="123456789012",
                                    region_name="us-east-1", bucket_name="big")
    return server, url


def _peak_rss_mb() -> float:
    """VmHWM, this process's own peak (ru_maxrss would carry over the parent's at fork)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _plan_child(url: str) -> None:
    """Run in a fresh process: plan `s3://big/in/` from `url`, print figures as JSON."""
    os.environ.update(AWS_ENDPOINT_URL=url, AWS_ACCESS_KEY_ID="testing",
                      AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    client = make_s3_client()
    rss0 = _peak_rss_mb()
    wall0, cpu0 = time.monotonic(), time.process_time()
    from pagegate.io.s3 import S3Store

    plan = plan_shards(["s3://big/in/"], workspace=S3Store("big", "out", client=client),
                       target_pages=20_000, target_pdfs=1_000, s3_client=client,
                       bytes_per_page=100_000)
    print(json.dumps({
        "pdfs": plan.pdfs, "shards": len(plan.shards), "estimated_pages": plan.estimated_pages,
        "wall_s": round(time.monotonic() - wall0, 1), "cpu_s": round(time.process_time() - cpu0, 1),
        "rss_before_mb": round(rss0, 1),
        "peak_rss_mb": round(_peak_rss_mb(), 1),
    }))


def _measure(url: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "bench.scaling", "plan-child", url],
                          capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def bench_planning(args: argparse.Namespace) -> None:
    rows = []
    if args.moto_keys:
        server, url = _moto(args.moto_keys)
        try:
            rows.append({"server": "moto", "keys": args.moto_keys, **_measure(url)})
            print(json.dumps(rows[-1]), flush=True)
        finally:
            server.stop()
    for keys in args.keys:
        with ListingServer(keys) as listing:
            rows.append({"server": "listing stub", "keys": keys, **_measure(listing.url)})
            print(json.dumps(rows[-1]), flush=True)
    print("\n| S3 server | keys | shards | wall s | planner CPU s | peak RSS MB (at start) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['server']} | {r['keys']:,} | {r['shards']} | {r['wall_s']} | {r['cpu_s']} "
              f"| {r['peak_rss_mb']} ({r['rss_before_mb']}) |")


# ----------------------------------------------------------------------------- estimate


def bench_estimate(args: argparse.Namespace) -> None:
    """The page estimate against counted pages, on a mixed corpus (text, image, rotated,
    scanned, owner-locked PDFs: 1.2 to 28 KB per page), for several sample sizes, each
    drawn `--draws` times (a salt in the sample rank), at job and shard level."""
    with tempfile.TemporaryDirectory(prefix="pagegate-est-") as tmp:
        paths = samples.write_sample_corpus(Path(tmp), good=args.pdfs, include_bad=False)
        truth = [(p.stat().st_size, inspect_pdf(p.read_bytes()).page_count) for p in paths]
    total = sum(pages for _, pages in truth)
    print(f"corpus: {len(truth)} PDFs, {total} pages, "
          f"{sum(size for size, _ in truth) / total:,.0f} bytes per page overall")
    print("\n| sample | job total error: mean / max over draws | leave-one-out total (mean) "
          "| per-PDF median error | shard (~100 pages) error: median / max |")
    print("|---|---|---|---|---|")
    for k in args.sample_sizes:
        job, loo, per_pdf, shard_med, shard_max = [], [], [], [], []
        for draw in range(args.draws):
            ranked = sorted(range(len(truth)), key=lambda i: sample_rank(f"{draw}:{paths[i].name}"))
            sample = [SizedPdf(*truth[i]) for i in ranked[:k]]
            model = fit_page_model(sample)
            estimates = [model.estimate(size) for size, _ in truth]
            job.append(abs(sum(estimates) - total) / total)
            error = leave_one_out(sample)
            if error is not None:
                loo.append(error.total_relative_error)
                per_pdf.append(error.median_relative_error)
            shard_errors = []
            for start in range(0, len(truth), 30):  # ~30 PDFs x 3.5 pages per shard
                est = sum(estimates[start:start + 30])
                true = sum(p for _, p in truth[start:start + 30])
                shard_errors.append(abs(est - true) / true)
            shard_med.append(statistics.median(shard_errors))
            shard_max.append(max(shard_errors))
        print(f"| {k} | {statistics.mean(job):.1%} / {max(job):.1%} | {statistics.mean(loo):.1%} "
              f"| {statistics.mean(per_pdf):.0%} | {statistics.mean(shard_med):.1%} / "
              f"{max(shard_max):.1%} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    n = sub.add_parser("nodes", help="throughput on 1, 2, 4 simulated nodes")
    n.add_argument("--nodes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4])
    n.add_argument("--pdfs", type=int, default=48)
    n.add_argument("--shard-pages", type=int, default=16)
    n.add_argument("--time-scale", type=float, default=0.1)
    pl = sub.add_parser("planning", help="planning time and peak memory")
    pl.add_argument("--keys", type=lambda s: [int(x) for x in s.split(",")], default=[100_000, 1_000_000])
    pl.add_argument("--moto-keys", type=int, default=100_000)
    est = sub.add_parser("estimate", help="page estimate error on a mixed corpus")
    est.add_argument("--pdfs", type=int, default=200)
    est.add_argument("--draws", type=int, default=10)
    est.add_argument("--sample-sizes", type=lambda s: [int(x) for x in s.split(",")],
                     default=[8, 32, 64])
    child = sub.add_parser("plan-child")
    child.add_argument("url")
    args = p.parse_args(argv)
    if args.what == "nodes":
        bench_nodes(args)
    elif args.what == "planning":
        bench_planning(args)
    elif args.what == "estimate":
        bench_estimate(args)
    else:
        _plan_child(args.url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
