"""Runs that share a workspace: the pages all of them sent against the corpus's pages.

    python -m bench.shared_workspace                 # three runs, local workspace (~2 min)
    python -m bench.shared_workspace --s3            # the same on moto's S3 server
    python -m bench.shared_workspace --s3 --kill     # one of the three SIGKILLed mid-run

Three `pagegate run` commands over one corpus (300 PDFs of 3 pages by default) and one
workspace, started `--apart` seconds apart against one `ci` simulator, with no
PREFECT_API_URL: each starts a temporary Prefect server of its own, as ad hoc runs on
three machines would, and they share nothing but the workspace. The simulator's
`vllm:request_success_total` counts every page sent. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from pagegate.samples import text_pdf
from pagegate.sim.process import SimProcess

REPO = Path(__file__).resolve().parent.parent
SENT = "vllm:request_success_total"


def sent(metrics_url: str) -> float:
    text = httpx.get(metrics_url, timeout=10).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == SENT)


def kill_tree(pid: int) -> None:
    parent = psutil.Process(pid)
    for p in [*parent.children(recursive=True), parent]:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


def committed(ws: str, s3: Any) -> int:
    if s3 is None:
        return len(list(Path(ws, "results").glob("*.jsonl")))
    return int(s3.list_objects_v2(Bucket="bench", Prefix="ws/results/").get("KeyCount", 0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pdfs", type=int, default=300)
    parser.add_argument("--pages", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--apart", type=float, default=2.0, help="seconds between starts")
    parser.add_argument("--pages-per-group", type=int, default=15)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--s3", action="store_true", help="the workspace on moto's S3 server")
    parser.add_argument("--kill", action="store_true", help="SIGKILL the first run mid-run")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="pagegate-shared-"))
    src = tmp / "in"
    src.mkdir()
    for i in range(args.pdfs):
        (src / f"d{i:03d}.pdf").write_bytes(text_pdf(args.pages, title=f"Doc {i}", seed=i))
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    s3, moto = None, None
    ws = str(tmp / "ws")
    if args.s3:
        import boto3
        from moto.server import ThreadedMotoServer

        moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        moto.start()
        host, port = moto.get_host_and_port()
        url = f"http://{host}:{port}"
        env.update(AWS_ENDPOINT_URL=url, AWS_ACCESS_KEY_ID="testing",
                   AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
        s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        s3.create_bucket(Bucket="bench")
        ws = "s3://bench/ws"
    with SimProcess(profile="ci") as sim, contextlib.ExitStack() as logs:
        started = time.monotonic()
        procs = []
        for i in range(args.runs):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "pagegate.cli", "run", str(src), "--workspace", ws,
                 "--server", sim.base_url, "--pages-per-group", str(args.pages_per_group),
                 "--workers", str(args.workers), "--claim-lease-seconds", str(args.lease),
                 "--json"],
                cwd=REPO, env=env, stdout=subprocess.PIPE, text=True,
                stderr=logs.enter_context(open(tmp / f"run{i}.log", "w"))))
            time.sleep(args.apart)
        if args.kill:
            while committed(ws, s3) < args.pdfs // 5:
                time.sleep(0.1)  # polling the workspace: the runs are other processes
            kill_tree(procs[0].pid)
        outs = [p.communicate(timeout=1800)[0] for p in procs]
        elapsed = time.monotonic() - started
        pages_sent = sent(sim.metrics_url)
    runs = []
    for proc, out in zip(procs, outs, strict=True):
        summary = json.loads(out) if proc.returncode == 0 else {}
        runs.append({"exit": proc.returncode, "pdfs_ok": summary.get("pdfs_ok"),
                     "this_run": (summary.get("pdfs_ok", 0) - summary.get("pdfs_ok_by_others", 0))
                     if summary else None})
    corpus = args.pdfs * args.pages
    print(json.dumps({
        "store": "s3" if args.s3 else "local", "killed": args.kill, "pdfs": args.pdfs,
        "corpus_pages": corpus, "pages_sent": int(pages_sent),
        "sent_per_corpus_page": round(pages_sent / corpus, 3),
        "committed": committed(ws, s3), "elapsed_s": round(elapsed, 1), "runs": runs,
        "in_flight_bound": args.workers * args.pages_per_group if args.kill else 0,
    }))
    if moto is not None:
        moto.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
