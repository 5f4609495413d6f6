"""docs/operations.md, "When something is wrong": each row made by the real CLI.

Every test runs `python -m pagegate.cli` in a subprocess against the simulator or
moto's S3 server (processes, over HTTP), and checks the row's exit code, the exact line
printed and what was kept. The time each took is printed (`-s`), for the table; no test
asserts on it. The preflight rows also check that no page reached the server.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pagegate import samples
from tests.fixtures.s3 import S3Server
from tests.fixtures.sim import SimServer
from tests.helpers import REPO, metric_total, read_ledger, read_results

pytestmark = [pytest.mark.slow]

SENT = "vllm:request_success_total"  # page requests the simulator answered


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str
    seconds: float

    @property
    def last_line(self) -> str:
        """The last line on stderr that is not Prefect's log (its lines start with a time)."""
        lines = [ln for ln in self.err.splitlines() if ln and not ln[:2].isdigit()]
        return lines[-1] if lines else ""


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> Ran:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pagegate.cli", *args], cwd=REPO,
                          env=env or dict(os.environ), capture_output=True, text=True,
                          timeout=timeout)
    ran = Ran(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started)
    print(f"pagegate {args[0]}: exit {ran.code} after {ran.seconds:.1f} s: {ran.last_line}")
    return ran


def aws_env(endpoint: str, **changes: str | None) -> dict[str, str]:
    """The AWS environment of tests/fixtures/s3.py, for a subprocess; None removes a name."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="testing",
               AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
               AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull,
               AWS_EC2_METADATA_DISABLED="true")
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


@pytest.fixture
def pdfs(tmp_path: Path) -> Path:
    src = tmp_path / "in"
    src.mkdir()
    for i in range(2):
        (src / f"d{i}.pdf").write_bytes(samples.text_pdf(1, title=f"Doc {i}", seed=i))
    return src


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens once the socket is closed


def nothing_sent(sim: SimServer, before: float) -> bool:
    return metric_total(sim.metrics_url, SENT) == before


# --------------------------------------------------------------------- preflight: exit 2 or 3


def test_wrong_model_stops_before_any_page(sim: SimServer, pdfs: Path, tmp_path: Path) -> None:
    before = metric_total(sim.metrics_url, SENT)
    ran = cli("run", str(pdfs), "--workspace", str(tmp_path / "ws"), "--server", sim.base_url,
              "--model", "olmocrx")
    assert ran.code == 2
    assert ran.last_line == (f"error: model 'olmocrx' is not served by {sim.base_url}; "
                             "it serves olmocr: pass --model olmocr")
    assert nothing_sent(sim, before) and not (tmp_path / "ws" / "results").exists()


def test_unwritable_local_workspace(sim: SimServer, pdfs: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    ws = tmp_path / "file" / "ws"
    before = metric_total(sim.metrics_url, SENT)
    ran = cli("run", str(pdfs), "--workspace", str(ws), "--server", sim.base_url)
    assert ran.code == 2
    assert ran.last_line == (f"error: workspace {ws} is not writable (Not a directory); "
                             "fix its permissions or choose another --workspace")
    assert nothing_sent(sim, before)


def test_unwritable_s3_workspace(sim: SimServer, s3_server: S3Server, pdfs: Path) -> None:
    bucket = f"pg-missing-{uuid.uuid4().hex[:8]}"
    before = metric_total(sim.metrics_url, SENT)
    ran = cli("run", str(pdfs), "--workspace", f"s3://{bucket}/out", "--server", sim.base_url,
              env=aws_env(s3_server.endpoint_url))
    assert ran.code == 2
    assert ran.last_line == (f"error: workspace s3://{bucket}/out is not writable (NoSuchBucket); "
                             "fix its permissions or choose another --workspace")
    assert nothing_sent(sim, before)


def test_no_s3_credentials(sim: SimServer, s3_server: S3Server, pdfs: Path) -> None:
    env = aws_env(s3_server.endpoint_url, AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None)
    ran = cli("run", str(pdfs), "--workspace", "s3://any/out", "--server", sim.base_url, env=env)
    assert ran.code == 2
    assert ran.last_line == (
        "error: no S3 credentials for s3://any/out: set AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), or name a prefect-aws block with --aws-credentials"
    )


def test_s3_endpoint_that_does_not_answer(sim: SimServer, pdfs: Path) -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    ran = cli("run", str(pdfs), "--workspace", "s3://any/out", "--server", sim.base_url,
              env=aws_env(endpoint))
    assert ran.code == 2
    assert ran.last_line.startswith("error: workspace s3://any/out is not writable "
                                    f'(Could not connect to the endpoint URL: "{endpoint}/')


def test_server_where_nothing_listens(pdfs: Path, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    ran = cli("run", str(pdfs), "--workspace", str(tmp_path / "ws"), "--server", url)
    assert ran.code == 3
    assert ran.last_line == (f"error: server {url} does not answer (connection refused); "
                             "start it, or point --server at one")


def test_server_url_without_v1(sim: SimServer, pdfs: Path, tmp_path: Path) -> None:
    ran = cli("run", str(pdfs), "--workspace", str(tmp_path / "ws"), "--server", sim.root_url)
    assert ran.code == 2
    assert ran.last_line == (f"error: {sim.root_url}/models answered 404: --server takes the "
                             "OpenAI base URL, e.g. http://127.0.0.1:8000/v1")


def test_source_that_does_not_exist(sim: SimServer, tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    ran = cli("run", str(missing), "--workspace", str(tmp_path / "ws"), "--server", sim.base_url)
    assert ran.code == 2
    assert ran.last_line == (f"error: source '{missing}' matches nothing; "
                             "check the path, pattern or bucket")


def test_empty_s3_prefix(sim: SimServer, s3_server: S3Server, s3_client: Any, tmp_path: Path) -> None:
    bucket = f"pg-empty-{uuid.uuid4().hex[:8]}"
    s3_client.create_bucket(Bucket=bucket)
    ran = cli("run", f"s3://{bucket}/in/", "--workspace", str(tmp_path / "ws"),
              "--server", sim.base_url, env=aws_env(s3_server.endpoint_url))
    assert ran.code == 2
    assert ran.last_line == (f"error: source 's3://{bucket}/in/' matches nothing; "
                             "check the path, pattern or bucket")


@pytest.mark.parametrize(("flag", "value"), [
    ("--pages-per-group", "0"), ("--workers", "0"), ("--max-page-error-rate", "2"),
    ("--max-fallback-share", "-1"), ("--s3-retry-mode", "fast"),
])
def test_option_out_of_range(flag: str, value: str, pdfs: Path, tmp_path: Path) -> None:
    ran = cli("run", str(pdfs), "--workspace", str(tmp_path / "ws"), flag, value)
    assert ran.code == 2
    assert f"Invalid value for '{flag}'" in ran.err
    assert "Traceback" not in ran.err and not (tmp_path / "ws").exists()


def test_stats_of_a_workspace_that_does_not_exist(tmp_path: Path) -> None:
    ran = cli("stats", str(tmp_path / "ws"))
    assert ran.code == 2
    assert ran.last_line == (f"error: workspace {tmp_path / 'ws'} does not exist (or holds "
                             "nothing); check the path")


# --------------------------------------------------------------------- runs that start


def test_all_converted_then_a_rerun_skips_them(
    sim: SimServer, pdfs: Path, tmp_path: Path, api_env: dict[str, str]
) -> None:
    args = ("run", str(pdfs), "--workspace", str(tmp_path / "ws"), "--server", sim.base_url)
    first = cli(*args, env=api_env)
    again = cli(*args, env=api_env)
    assert first.code == 0 and first.out.startswith("PDFs ok: 2  failed: 0  skipped: 0  pages: 2")
    assert again.code == 0 and again.out.startswith("PDFs ok: 0  failed: 0  skipped: 2  pages: 0")
    assert len(read_results(tmp_path / "ws")) == 2


@pytest.mark.parametrize(("flag", "kind"), [
    ("--aws-credentials", "prefect-aws"), ("--gate", "AdmissionGate"),
    ("--pdf-password-secret", "Secret"),
])
def test_a_block_that_does_not_exist(
    flag: str, kind: str, sim: SimServer, pdfs: Path, tmp_path: Path, api_env: dict[str, str]
) -> None:
    before = metric_total(sim.metrics_url, SENT)
    ran = cli("run", str(pdfs), "--workspace", str(tmp_path / "ws"), "--server", sim.base_url,
              flag, "nosuch", env=api_env)
    assert ran.code == 2
    assert ran.last_line == f"error: no {kind} block named 'nosuch': create it, or pass another {flag}"
    assert "Traceback" not in ran.err
    assert nothing_sent(sim, before) and not (tmp_path / "ws" / "results").exists()


def test_a_list_with_missing_entries_converts_the_others(
    sim: SimServer, tmp_path: Path, api_env: dict[str, str]
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    missing = {5, 50, 95}
    lines = []
    for i in range(100):
        path = src / f"d{i:03d}.pdf"
        lines.append(str(path))
        if i not in missing:
            path.write_bytes(samples.text_pdf(1, title=f"D{i}", seed=i))
    listing = src / "list.txt"
    listing.write_text("\n".join(lines) + "\n")
    ws = tmp_path / "ws"

    ran = cli("run", str(listing), "--workspace", str(ws), "--server", sim.base_url, env=api_env)

    gone = {lines[i] for i in missing}
    assert ran.code == 1
    assert ran.out.startswith("PDFs ok: 97  failed: 3  skipped: 0  pages: 97")
    assert (f"  FAILED {lines[5]}: not_found (no file or object matches '{lines[5]}' "
            f"(listed in '{listing}'))") in ran.out.splitlines()
    assert len(read_results(ws)) == 97
    assert {s: r["reason"] for s, r in read_ledger(ws).items()} == dict.fromkeys(gone, "not_found")


def test_s3_throttles_the_run(
    sim: SimServer, s3_proxy: Any, s3_bucket: str, s3_client: Any, tmp_path: Path,
    api_env: dict[str, str],
) -> None:
    for i in range(2):
        s3_client.put_object(Bucket=s3_bucket, Key=f"in/d{i}.pdf",
                             Body=samples.text_pdf(1, title=f"S{i}", seed=i))
    s3_proxy.plan.unavailable_every(3)
    env = {**api_env, **aws_env(s3_proxy.endpoint_url)}
    ran = cli("run", f"s3://{s3_bucket}/in/", "--workspace", str(tmp_path / "ws"),
              "--server", sim.base_url, env=env)
    assert ran.code == 0, ran.err
    retries = [ln.split(" - ", 1)[-1] for ln in ran.err.splitlines() if "retrying, attempt" in ln]
    assert retries, ran.err
    assert all(
        re.fullmatch(rf"S3 \w+ to {s3_proxy.endpoint_url}: retrying, attempt \d+ of 11 "
                     r"after HTTP 503 ServiceUnavailable", line)
        for line in retries
    ), retries
    print(f"first retry line: {retries[0]}")
    assert len(read_results(tmp_path / "ws")) == 2


def test_a_file_that_is_not_a_pdf(
    sim: SimServer, pdfs: Path, tmp_path: Path, api_env: dict[str, str]
) -> None:
    (pdfs / "page.pdf").write_text("<html>not a pdf</html>")
    ran = cli("run", str(pdfs), "--workspace", str(tmp_path / "ws"), "--server", sim.base_url,
              env=api_env)
    assert ran.code == 1
    assert any(ln.startswith(f"  FAILED {pdfs / 'page.pdf'}: not_a_pdf (")
               for ln in ran.out.splitlines())
    assert len(read_results(tmp_path / "ws")) == 2
    assert set(read_ledger(tmp_path / "ws")) == {str(pdfs / "page.pdf")}


def test_most_pages_fell_back_to_the_text_layer(
    start_sim: Any, pdfs: Path, tmp_path: Path, api_env: dict[str, str]
) -> None:
    garbage = start_sim(profile="ci", garbage_below_temperature=99)  # no reply ever parses
    ran = cli("run", str(pdfs), "--workspace", str(tmp_path / "ws"), "--server", garbage.base_url,
              "--max-page-retries", "1", env=api_env)
    assert ran.code == 1
    assert ran.out.splitlines()[0] == (
        "WARNING: 2 of 2 pages fell back to the text layer (more than 50%): the model did not "
        "read them; check the server's log and --model (--max-fallback-share sets the limit)"
    )
    assert len(read_results(tmp_path / "ws")) == 2  # written, fallback pages flagged


def test_server_that_refuses_every_page(
    start_sim: Any, pdfs: Path, tmp_path: Path, api_env: dict[str, str]
) -> None:
    busy = start_sim(profile="ci", reject_status_every=1)  # 503 to every page, /v1/models fine
    ws = tmp_path / "ws"
    ran = cli("run", str(pdfs), "--workspace", str(ws), "--server", busy.base_url,
              "--server-unavailable-after", "2", env=api_env)
    assert ran.code == 3
    records = read_ledger(ws)
    assert len(records) == 2 and {r["reason"] for r in records.values()} == {"server_unavailable"}
    for record in records.values():  # the detail names the server and the cause
        assert f"{busy.base_url}/chat/completions: HTTP 503" in record["detail"]
    assert read_results(ws) == {}


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_stopped_by_a_signal(
    signum: int, code: int, start_sim: Any, tmp_path: Path, api_env: dict[str, str]
) -> None:
    # One slot: after the third commit 97 pages are left one at a time, tens of seconds
    # that no stall of this test's poll can outlast, so the signal lands mid-run.
    sim = start_sim(profile="ci", max_num_seqs=1)
    src = tmp_path / "in"
    src.mkdir()
    for i in range(100):
        (src / f"d{i:02d}.pdf").write_bytes(samples.text_pdf(1, title=f"D{i}", seed=i))
    ws = tmp_path / "ws"
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pagegate.cli", "run", str(src), "--workspace", str(ws),
         "--server", sim.base_url, "--pages-per-group", "5"],
        cwd=REPO, env=api_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        while len(list((ws / "results").glob("*.jsonl"))) < 3:  # the run is under way
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)  # polling the workspace
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ran = Ran(proc.returncode, out, err, time.monotonic() - started)
    print(f"pagegate run, {signal.Signals(signum).name}: exit {ran.code}: {ran.last_line}")
    committed = len(read_results(ws))
    assert ran.code == code
    name = signal.Signals(signum).name
    assert (f"interrupted by {name}: {committed} PDFs committed; rerun the same command to "
            "continue") in err.splitlines()
    assert out.startswith(f"PDFs ok: {committed}  failed: 0  ")
    assert committed < 100
    assert not list(ws.rglob(".pagegate-tmp-*"))  # nothing half-written
