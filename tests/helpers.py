"""Helpers shared by the test modules: run a flow, read a workspace, query a server's
/metrics, drive a server process. Test modules import from here, never from each other."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.vllm_cpu import TINY_GATE as TINY_GATE_CONFIG
from pagegate import samples
from pagegate.admission import GateConfig
from pagegate.sim.process import SimProcess

REPO = Path(__file__).resolve().parents[1]


SLOW = ("--time-scale", "0.25")  # a quarter of real speed, so the kill lands mid-run


TINY_GATE = {k: v for k, v in asdict(TINY_GATE_CONFIG).items() if v != getattr(GateConfig(), k)}


@dataclass(frozen=True)
class Audit:
    results: int
    duplicates: int
    ledger: int
    sources: frozenset[str]
    fallback_pages: int


def run_flow(**params: Any) -> tuple[Any, dict[str, Any]]:
    from pagegate.flows.ocr_pdfs import ocr_pdfs

    run: Any = ocr_pdfs(**params, return_state=True)  # a coroutine; Prefect types it loosely
    state = asyncio.run(run)
    data = state.result(raise_on_failure=False)
    return state, data


def metric_total(metrics_url: str, name: str) -> float:
    text = httpx.get(metrics_url, timeout=10).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                total += sample.value
    return total


def engine_busy(metrics_url: str) -> float:
    """Requests on the engine (running plus waiting), or 0 when /metrics does not answer:
    it can answer late on a loaded machine, or not at all around a kill."""
    try:
        return sum(metric_total(metrics_url, name) for name in
                   ("vllm:num_requests_running", "vllm:num_requests_waiting"))
    except httpx.TransportError:
        return 0.0


def busy(sim: SimProcess) -> float:
    return sum(metric_total(sim.metrics_url, name)
               for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"))


def healthy(port: int, *, timeout: float = 2.0) -> bool:
    """Whether the server on `port` answers /health with 200; False while it is down."""
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=timeout).status_code == 200
    except httpx.TransportError:
        return False


def read_results(workspace: Path) -> dict[str, dict[str, Any]]:
    docs = {}
    for path in sorted((workspace / "results").glob("*.jsonl")):
        lines = path.read_text().splitlines()
        assert len(lines) == 1, "one Dolma line per PDF"
        doc = json.loads(lines[0])
        docs[doc["metadata"]["Source-File"]] = doc
    return docs


def read_ledger(workspace: Path) -> dict[str, dict[str, Any]]:
    return {
        rec["source"]: rec
        for rec in (json.loads(p.read_text()) for p in (workspace / "ledger").glob("*.json"))
    }


def audit(workspace: Path) -> Audit:
    """Read every result object: exactly one complete Dolma line each."""
    ids: list[str] = []
    sources: list[str] = []
    fallback = 0
    for path in sorted((workspace / "results").glob("*.jsonl")):
        lines = path.read_text().splitlines()
        assert len(lines) == 1, f"{path.name}: {len(lines)} lines"
        doc = json.loads(lines[0])
        assert path.name == f"{doc['id']}.jsonl"
        ids.append(doc["id"])
        sources.append(doc["metadata"]["Source-File"])
        fallback += doc["metadata"]["total-fallback-pages"]
    return Audit(
        results=len(ids),
        duplicates=len(sources) - len(set(sources)) + len(ids) - len(set(ids)),
        ledger=len(read_ledger(workspace)) if (workspace / "ledger").exists() else 0,
        sources=frozenset(sources),
        fallback_pages=fallback,
    )


def cli_env() -> dict[str, str]:
    from prefect.settings import PREFECT_API_URL

    return {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}


def write_corpus(src: Path, count: int, pages: int) -> dict[str, int]:
    src.mkdir(parents=True)
    written = {}
    for i in range(count):
        path = src / f"d{i:02d}.pdf"
        path.write_bytes(samples.text_pdf(pages, title=f"Doc {i}", seed=i))
        written[str(path)] = pages
    return written


def kill_when_busy(sim: SimProcess, ws: Path, committed: int) -> float:
    """SIGKILL the simulator once `committed` PDFs are written and pages are on it."""
    deadline = time.monotonic() + 60
    while len(list((ws / "results").glob("*.jsonl"))) < committed or busy(sim) == 0:
        assert time.monotonic() < deadline, "the run never got going"
        time.sleep(0.02)  # polling the workspace and the server's queue
    assert sim.process is not None
    sim.process.kill()
    sim.process.wait(timeout=10)
    return time.monotonic()


def prefect_env(home: Path) -> dict[str, str]:
    from prefect.settings import PREFECT_API_URL

    return {
        **os.environ,
        "PREFECT_API_URL": str(PREFECT_API_URL.value()),
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PWD": str(REPO),  # prefect.yaml's pull step is "{{ $PWD }}", filled in at deploy time
        # a short poll so the worker picks the run up within a second, not the default 10 s
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PREFECT_WORKER_PREFETCH_SECONDS": "5",
    }


def prefect_cli(env: dict[str, str], *args: str, timeout: float = 120) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "prefect", "--no-prompt", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
    )
    assert proc.returncode == 0, f"prefect {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout
