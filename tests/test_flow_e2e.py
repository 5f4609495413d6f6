"""The ocr-pdfs flow end to end: real Prefect API, real S3 server, real simulator process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest

from pagegate import samples
from pagegate.io.s3 import make_s3_client
from pagegate.output.documents import document_id
from pagegate.plan.pending import plan_pending
from tests.helpers import metric_total, read_ledger, read_results, run_flow

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]


def test_local_in_local_out_with_markdown_and_a_bad_pdf(tmp_path: Path, start_sim: Any) -> None:
    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    (src / "a.pdf").write_bytes(samples.text_pdf(3, title="Alpha"))
    (src / "sub" / "b.pdf").write_bytes(samples.image_pdf())
    (src / "locked.pdf").write_bytes(samples.encrypted_pdf())
    ws = tmp_path / "ws"
    sim = start_sim(profile="ci")

    state, summary = run_flow(
        sources=[str(src)], workspace=str(ws), server_url=sim.base_url, markdown=True,
        pages_per_group=2,
    )

    assert state.is_failed()
    assert "locked.pdf" in state.message
    docs = read_results(ws)
    assert set(docs) == {str(src / "a.pdf"), str(src / "sub" / "b.pdf")}
    alpha = docs[str(src / "a.pdf")]
    assert alpha["id"] == document_id(str(src / "a.pdf"))
    assert alpha["metadata"]["pdf-total-pages"] == 3
    assert alpha["metadata"]["total-fallback-pages"] == 0
    spans = alpha["attributes"]["pdf_page_numbers"]
    assert [s[2] for s in spans] == [1, 2, 3]
    for start, end, _page in spans:
        assert alpha["text"][start:end].startswith("page "), "each page's text is the model's reply"
    ledger = read_ledger(ws)
    assert list(ledger) == [str(src / "locked.pdf")]
    assert ledger[str(src / "locked.pdf")]["reason"] == "encrypted"
    # Relative to the source folder, its sub-folders kept (not the absolute path mirrored).
    assert sorted(p.relative_to(ws / "markdown").as_posix() for p in ws.rglob("*.md")) == [
        "a.md", "sub/b.md"
    ]
    md = ws / "markdown" / "sub" / "b.md"
    assert md.read_text() == docs[str(src / "sub" / "b.pdf")]["text"]
    assert json.loads((ws / "pagegate-outputs.json").read_text())["markdown_root"] == f"{src}/"
    assert summary["pdfs_ok"] == 2 and summary["pdfs_failed"] == 1


def test_s3_in_s3_out_and_groups_stable(s3_bucket: str, start_sim: Any) -> None:
    s3 = boto3.client("s3")
    for i in range(4):
        s3.put_object(Bucket=s3_bucket, Key=f"in/doc{i}.pdf", Body=samples.text_pdf(i + 1, title=f"D{i}"))
    s3.put_object(Bucket=s3_bucket, Key="in/notes.txt", Body=b"not a pdf, not listed")
    source = f"s3://{s3_bucket}/in/"
    plan1 = plan_pending([source], workspace=None, pages_per_group=3, s3_client=make_s3_client())
    plan2 = plan_pending([source], workspace=None, pages_per_group=3, s3_client=make_s3_client())
    assert [g.id for g in plan1.groups] == [g.id for g in plan2.groups]
    assert len(plan1.groups) > 1
    sim = start_sim(profile="ci")

    state, summary = run_flow(
        sources=[source], workspace=f"s3://{s3_bucket}/out", server_url=sim.base_url,
        pages_per_group=3,
    )

    assert state.is_completed(), state.message
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=s3_bucket, Prefix="out/")["Contents"]]
    results = [k for k in keys if k.startswith("out/results/")]
    assert len(results) == 4
    pages = 0
    for key in results:
        doc = json.loads(s3.get_object(Bucket=s3_bucket, Key=key)["Body"].read())
        assert doc["metadata"]["Source-File"].startswith(f"s3://{s3_bucket}/in/doc")
        pages += doc["metadata"]["pdf-total-pages"]
    assert pages == 1 + 2 + 3 + 4 == summary["pages"]
    assert not [k for k in keys if k.startswith("out/ledger/")]


def test_page_retried_at_higher_temperature_after_bad_replies(tmp_path: Path, start_sim: Any) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.pdf").write_bytes(samples.text_pdf(2))
    # The simulator answers without front matter below temperature 0.15: olmOCR's schedule
    # (0.1, 0.1, 0.2, ...) fails twice per page, then succeeds on the third attempt.
    sim = start_sim(profile="ci", garbage_below_temperature=0.15)

    state, _ = run_flow(sources=[str(tmp_path / "in")], workspace=str(tmp_path / "ws"),
                        server_url=sim.base_url)

    assert state.is_completed(), state.message
    doc = next(iter(read_results(tmp_path / "ws").values()))
    assert doc["metadata"]["total-fallback-pages"] == 0
    assert metric_total(sim.metrics_url, "vllm:request_success_total") == 2 * 3


def test_fallback_text_when_replies_never_parse(tmp_path: Path, start_sim: Any) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.pdf").write_bytes(samples.text_pdf(2, title="Fallback"))
    sim = start_sim(profile="ci", garbage_below_temperature=99)

    state, _ = run_flow(sources=[str(tmp_path / "in")], workspace=str(tmp_path / "ws"),
                        server_url=sim.base_url, max_page_retries=2)

    # the document is written, but a run the model did not read fails saying so
    assert state.is_failed() and "2 of 2 pages fell back to the text layer" in str(state.message)
    doc = next(iter(read_results(tmp_path / "ws").values()))
    assert doc["metadata"]["total-fallback-pages"] == 2
    assert doc["attributes"]["is_fallback_page"] == [True, True]
    spans = doc["attributes"]["pdf_page_numbers"]
    assert "Fallback page 1" in doc["text"][spans[0][0]:spans[0][1]]
    assert "Fallback page 2" in doc["text"][spans[1][0]:spans[1][1]]
    assert metric_total(sim.metrics_url, "vllm:request_success_total") == 2 * 2


def test_rotated_page_is_rerendered_and_retried(tmp_path: Path, start_sim: Any) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "r.pdf").write_bytes(samples.rotated_pdf())
    # The simulator calls a landscape image rotated; page 2 has /Rotate 90 and renders landscape.
    sim = start_sim(profile="ci", rotate_landscape=True)

    state, _ = run_flow(sources=[str(tmp_path / "in")], workspace=str(tmp_path / "ws"),
                        server_url=sim.base_url)

    assert state.is_completed(), state.message
    doc = next(iter(read_results(tmp_path / "ws").values()))
    assert doc["metadata"]["total-fallback-pages"] == 0
    assert doc["attributes"]["is_rotation_valid"] == [True, True]
    # one request per page, plus one re-rendered retry for the rotated page
    assert metric_total(sim.metrics_url, "vllm:request_success_total") == 3


def test_cli_run_on_twenty_mixed_pdfs(tmp_path: Path, start_sim: Any) -> None:
    from prefect.settings import PREFECT_API_URL

    files = samples.write_sample_corpus(tmp_path / "in", good=13, include_bad=True)
    bad = sorted(p for p in files if p.name.startswith("bad-"))
    assert len(files) >= 20
    sim = start_sim(profile="ci")
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}

    proc = subprocess.run(
        [sys.executable, "-m", "pagegate.cli", "run", str(tmp_path / "in"),
         "--workspace", str(tmp_path / "ws"), "--server", sim.base_url, "--pages-per-group", "10"],
        capture_output=True, text=True, env=env, timeout=600,
    )

    assert proc.returncode == 1, proc.stdout + proc.stderr
    for path in bad:
        assert f"FAILED {path}" in proc.stdout
    assert len(read_results(tmp_path / "ws")) == len(files) - len(bad)
    assert set(read_ledger(tmp_path / "ws")) == {str(p) for p in bad}


def test_gate_keeps_the_small_server_alive_through_the_flow(tmp_path: Path, start_sim: Any) -> None:
    """150 pages at once would crash `ci` (it dies above 64 waiting); through the gate they don't."""
    src = tmp_path / "in"
    src.mkdir()
    for i in range(15):
        (src / f"d{i:02d}.pdf").write_bytes(samples.text_pdf(10, title=f"Doc{i}", seed=i))
    sim = start_sim(profile="ci")

    state, summary = run_flow(sources=[str(src)], workspace=str(tmp_path / "ws"),
                              server_url=sim.base_url, pages_per_group=50)

    assert state.is_completed(), state.message
    assert summary["pages"] == 150 and summary["pdfs_ok"] == 15
    peak_waiting = metric_total(sim.metrics_url, "pagegate_sim:peak_waiting")
    print(f"gated flow: 150 pages, sim peak waiting {peak_waiting:.0f} (crash above 64)")
    assert peak_waiting < 64
