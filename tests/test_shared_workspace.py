"""Several `pagegate run` over one workspace split the work (pagegate.claims), through the
real CLI against the simulator: on disk and on the test's S3 server, with one run killed
with SIGKILL, and with one stopped with SIGSTOP for longer than its lease.

The pages the simulator answered, over all the runs, count the GPU work: the corpus's
pages when every page is sent once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.fixtures.sim import SimServer
from tests.helpers import REPO, metric_total, read_ledger, read_results, write_corpus
from tests.test_when_wrong import SENT, aws_env

pytestmark = [pytest.mark.slow]

PDFS = 60
PAGES = 2
PER_GROUP = 4     # --pages-per-group: 30 groups of 2 PDFs
WORKERS = 3       # --workers: groups each run holds at once
IN_FLIGHT_PAGES = WORKERS * PER_GROUP  # what a run that dies can have had on the server
LEASE = "4"       # --claim-lease-seconds: a dead run's groups free after 4 s


def start(src: Path, ws: str, sim: SimServer, env: dict[str, str], log: Path,
          *extra: str) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "pagegate.cli", "run", str(src), "--workspace", ws,
            "--server", sim.base_url, "--pages-per-group", str(PER_GROUP),
            "--workers", str(WORKERS), "--claim-lease-seconds", LEASE, *extra]
    return subprocess.Popen(args, cwd=REPO, env=env, text=True, stdout=open(log, "w"),
                            stderr=subprocess.STDOUT)


def finish(procs: list[subprocess.Popen[str]], logs: list[Path]) -> list[str]:
    outputs = []
    for proc, log in zip(procs, logs, strict=True):
        try:
            proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                kill_tree(proc)
        outputs.append(log.read_text())
    return outputs


def kill_tree(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the run and every process it started, as when its machine dies."""
    try:
        parent = psutil.Process(proc.pid)
        family = [*parent.children(recursive=True), parent]
    except psutil.NoSuchProcess:
        return
    for p in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    proc.wait(timeout=30)


def summary_line(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("PDFs ok:"))


def this_run(output: str) -> int:
    """The PDFs a run's summary says it did itself."""
    line = summary_line(output)
    if "(this run " not in line:
        return int(line.split()[2])
    return int(line.split("(this run ")[1].split(",")[0])


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)  # polling the workspace: the runs are other processes


def check_all_done_once(docs: dict[str, dict[str, Any]], outputs: list[str],
                        codes: list[int | None]) -> None:
    assert codes == [0] * len(codes), "\n\n".join(o[-3000:] for o in outputs)
    assert len(docs) == PDFS
    for output in outputs:  # each run speaks for the whole workspace
        words = summary_line(output).split()
        ok, skipped = int(words[2]), int(words[words.index("skipped:") + 1])
        assert (ok + skipped, words[words.index("failed:") + 1]) == (PDFS, "0"), output[-3000:]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    write_corpus(tmp_path / "in", PDFS, pages=PAGES)
    return tmp_path / "in"


def ad_hoc_env() -> dict[str, str]:
    """No PREFECT_API_URL: each run starts a temporary Prefect server of its own, so the
    runs share nothing but the workspace."""
    return {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}


def test_three_ad_hoc_runs_over_one_local_workspace_send_each_page_once(
    sim: SimServer, corpus: Path, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    before = metric_total(sim.metrics_url, SENT)
    logs = [tmp_path / f"run{i}.log" for i in range(3)]
    procs = []
    for log in logs:
        procs.append(start(corpus, str(ws), sim, ad_hoc_env(), log))
        time.sleep(1.0)  # started a second apart, as by hand on three machines
    outputs = finish(procs, logs)
    sent = metric_total(sim.metrics_url, SENT) - before
    shares = [this_run(o) for o in outputs]
    print(f"pages sent {sent:.0f} for {PDFS * PAGES}; PDFs per run {shares}")
    check_all_done_once(read_results(ws), outputs, [p.returncode for p in procs])
    assert sent <= 1.05 * PDFS * PAGES
    # Every PDF done by exactly one run. How they split depends on when each run gets
    # going (a temporary Prefect server each, on a loaded machine): the split itself is
    # shown in virtual time (tests/test_claims.py).
    assert sum(shares) == PDFS, shares
    assert read_ledger(ws) == {}


def test_three_runs_over_s3_one_killed_the_others_take_its_groups_over(
    sim: SimServer, corpus: Path, tmp_path: Path, s3_bucket: str, s3_client: Any,
    s3_server: Any, api_env: dict[str, str],
) -> None:
    ws = f"s3://{s3_bucket}/ws"
    env = {**api_env, **aws_env(s3_server.endpoint_url)}
    before = metric_total(sim.metrics_url, SENT)
    logs = [tmp_path / f"run{i}.log" for i in range(3)]
    procs = []
    for log in logs:
        procs.append(start(corpus, ws, sim, env, log))
        time.sleep(1.0)

    def committed() -> int:
        listed = s3_client.list_objects_v2(Bucket=s3_bucket, Prefix="ws/results/")
        return int(listed.get("KeyCount", 0))

    wait_until(lambda: committed() >= 10, "10 documents committed")
    kill_tree(procs[0])
    outputs = finish(procs[1:], logs[1:])
    sent = metric_total(sim.metrics_url, SENT) - before
    docs = {o["Key"]: o for o in s3_client.list_objects_v2(
        Bucket=s3_bucket, Prefix="ws/results/").get("Contents", [])}
    print(f"pages sent {sent:.0f} for {PDFS * PAGES} (+ at most {IN_FLIGHT_PAGES} in flight "
          f"on the killed run); PDFs per live run {[this_run(o) for o in outputs]}")
    check_all_done_once(docs, outputs, [p.returncode for p in procs[1:]])
    assert sent <= PDFS * PAGES + IN_FLIGHT_PAGES
    claims = s3_client.list_objects_v2(Bucket=s3_bucket, Prefix="ws/claims/")["Contents"]
    released = [json.loads(s3_client.get_object(Bucket=s3_bucket, Key=c["Key"])["Body"].read())
                for c in claims]
    assert sum(1 for c in released if c["released"] and c["outcome"]) == PDFS // 2


def test_a_run_stopped_past_its_lease_leaves_no_second_or_torn_document(
    sim: SimServer, corpus: Path, tmp_path: Path, api_env: dict[str, str]
) -> None:
    """SIGSTOP one of two runs for three leases once documents land, then SIGCONT it.
    The other takes its groups over; the stopped one, continued, writes nothing for
    them: every markdown file is its document's text, and no ledger record is left."""
    ws = tmp_path / "ws"
    before = metric_total(sim.metrics_url, SENT)
    logs = [tmp_path / f"run{i}.log" for i in range(2)]
    procs = [start(corpus, str(ws), sim, api_env, logs[0], "--markdown")]
    time.sleep(1.0)
    procs.append(start(corpus, str(ws), sim, api_env, logs[1], "--markdown"))
    wait_until(lambda: len(list((ws / "results").glob("*.jsonl"))) >= 6, "6 documents")
    paused = psutil.Process(procs[0].pid)
    paused.send_signal(signal.SIGSTOP)
    time.sleep(3 * float(LEASE))  # the stopped run's lease runs out meanwhile
    paused.send_signal(signal.SIGCONT)
    outputs = finish(procs, logs)
    sent = metric_total(sim.metrics_url, SENT) - before
    docs = read_results(ws)
    print(f"pages sent {sent:.0f} for {PDFS * PAGES}; PDFs per run "
          f"{[this_run(o) for o in outputs]}")
    check_all_done_once(docs, outputs, [p.returncode for p in procs])
    assert sent <= PDFS * PAGES + IN_FLIGHT_PAGES
    texts = {Path(d["metadata"]["Source-File"]).stem: d["text"] for d in docs.values()}
    markdown = {p.stem: p.read_text() for p in (ws / "markdown").rglob("*.md")}
    assert markdown == texts
    assert read_ledger(ws) == {}


def test_a_run_over_a_folder_and_one_over_a_list_of_its_pdfs_split_the_work(
    sim: SimServer, corpus: Path, tmp_path: Path, api_env: dict[str, str]
) -> None:
    """A shard run's source is a list of PDFs (its manifest); a run over the folder the
    PDFs are in and a run over such a list name the same PDFs, so they share one plan
    and split its groups."""
    ws = tmp_path / "ws"
    listing = tmp_path / "shard.txt"
    listing.write_text("".join(f"{p}\n" for p in sorted(corpus.glob("*.pdf"))))
    before = metric_total(sim.metrics_url, SENT)
    logs = [tmp_path / "folder.log", tmp_path / "list.log"]
    procs = [start(corpus, str(ws), sim, api_env, logs[0])]
    time.sleep(1.0)
    procs.append(start(listing, str(ws), sim, api_env, logs[1]))
    outputs = finish(procs, logs)
    sent = metric_total(sim.metrics_url, SENT) - before
    shares = [this_run(o) for o in outputs]
    print(f"pages sent {sent:.0f} for {PDFS * PAGES}; PDFs per run {shares}")
    check_all_done_once(read_results(ws), outputs, [p.returncode for p in procs])
    assert sent <= 1.05 * PDFS * PAGES
    assert sum(shares) == PDFS, shares
