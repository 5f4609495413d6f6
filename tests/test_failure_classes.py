"""Every way a PDF can fail ends in the ledger with its own reason, and the rest succeed.

Runs the ocr-pdfs flow (real Prefect API, simulator process) over a corpus of good and
malformed files, then over the page-error-rate and server-unavailable cases.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import random
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from pydantic import SecretStr

from pagegate import samples
from tests.helpers import read_ledger, read_results, run_flow

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]

PASSWORD = "secret"


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (16, 16), "white").save(out, "PNG")
    return out.getvalue()


def _zipped_pdf() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("inner.pdf", samples.text_pdf(1))
    return out.getvalue()


def _pages_without_kids() -> bytes:
    return (b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n"
            b"2 0 obj\n<< /Type /Pages /Count 3 >>\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n")


# name -> (bytes, ledger reason); run with password "secret" and at most 5 pages per PDF.
MALFORMED: dict[str, tuple[Callable[[], bytes], str]] = {
    "truncated": (samples.truncated_pdf, "unreadable"),
    "cut-inside-a-stream": (lambda: samples.text_pdf(2)[:600], "unreadable"),
    "broken-xref": (samples.broken_xref_pdf, "unreadable"),
    "header-only": (lambda: b"%PDF-1.7\n%%EOF\n", "unreadable"),
    "header-then-noise": (lambda: b"%PDF-1.4\n" + random.Random(1).randbytes(3000), "unreadable"),
    "page-tree-without-kids": (_pages_without_kids, "unreadable"),
    "zip-with-a-pdf-inside": (_zipped_pdf, "not_a_pdf"),
    "wrong-password": (lambda: samples.encrypted_pdf("other"), "encrypted"),
    "zero-pages": (samples.zero_page_pdf, "zero_pages"),
    "too-many-pages": (lambda: samples.text_pdf(6), "too_many_pages"),
    "empty-file": (samples.empty_file, "not_a_pdf"),
    "html-error-page": (samples.html_as_pdf, "not_a_pdf"),
    "random-bytes": (samples.random_bytes, "not_a_pdf"),
    "png-image": (_png, "not_a_pdf"),
    "gzipped-pdf": (lambda: gzip.compress(samples.text_pdf(1)), "not_a_pdf"),
}

GOOD: dict[str, tuple[Callable[[], bytes], int]] = {
    "text": (lambda: samples.text_pdf(2), 2),
    "encrypted-with-the-password": (lambda: samples.encrypted_pdf(PASSWORD), 2),
    "owner-locked": (samples.owner_locked_pdf, 2),
    "huge-200in-page": (samples.huge_page_pdf, 1),  # rendered under the pixel cap
    # The header is past the first 1024 bytes: pdfium opens the body once one is put in front.
    "junk-before-header": (lambda: b"x" * 2000 + samples.text_pdf(1), 1),
}


async def _recorded_parameters(flow_run_id: Any) -> dict[str, Any]:
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        return dict((await client.read_flow_run(flow_run_id)).parameters)


def test_malformed_corpus_each_file_gets_its_reason_and_the_rest_succeed(
    tmp_path: Path, start_sim: Any
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    for name, (make, _) in {**MALFORMED, **GOOD}.items():
        (src / f"{name}.pdf").write_bytes(make())
    assert len(MALFORMED) >= 15
    sim = start_sim(profile="ci")

    state, summary = run_flow(
        sources=[str(src)], workspace=str(tmp_path / "ws"), server_url=sim.base_url,
        pages_per_group=6, pdf_password=SecretStr(PASSWORD), max_pages_per_pdf=5,
    )

    ledger = read_ledger(tmp_path / "ws")
    got = {Path(uri).stem: rec["reason"] for uri, rec in ledger.items()}
    assert got == {name: reason for name, (_, reason) in MALFORMED.items()}
    results = read_results(tmp_path / "ws")
    pages = {Path(uri).stem: doc["metadata"]["pdf-total-pages"] for uri, doc in results.items()}
    assert pages == {name: n for name, (_, n) in GOOD.items()}
    assert all(doc["metadata"]["total-fallback-pages"] == 0 for doc in results.values())
    assert state.is_failed() and summary["pdfs_failed"] == len(MALFORMED)
    # The password reached the PDFs but was recorded masked, and is in no ledger record.
    params = asyncio.run(_recorded_parameters(state.state_details.flow_run_id))
    assert params["pdf_password"] == "**********"
    assert all(PASSWORD not in p.read_text() for p in (tmp_path / "ws" / "ledger").iterdir())
    print(f"malformed corpus: PDFs in {len(MALFORMED) + len(GOOD)}, results out {len(results)}, "
          f"duplicates 0, ledger entries {len(ledger)} "
          f"({len(set(got.values()))} reasons: {sorted(set(got.values()))})")


def test_page_error_rate_keeps_the_document_flagged_unless_asked_to_drop_it(
    tmp_path: Path, start_sim: Any
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.pdf").write_bytes(samples.text_pdf(2, title="Flagged"))
    sim = start_sim(profile="ci", garbage_below_temperature=99)  # every reply unusable

    # max_fallback_share=1: every page falls back here, which would fail the run itself
    kept_state, kept = run_flow(sources=[str(src)], workspace=str(tmp_path / "kept"),
                                server_url=sim.base_url, max_page_retries=1,
                                max_fallback_share=1.0)
    dropped_state, dropped = run_flow(sources=[str(src)], workspace=str(tmp_path / "dropped"),
                                      server_url=sim.base_url, max_page_retries=1,
                                      drop_on_page_errors=True)

    uri = str(src / "a.pdf")
    doc = read_results(tmp_path / "kept")[uri]
    assert doc["attributes"]["is_fallback_page"] == [True, True]
    record = read_ledger(tmp_path / "kept")[uri]
    assert record["reason"] == "page_error_rate"
    assert record["extra"] == {"fallback_pages": 2, "pages": 2, "max_page_error_rate": 0.004}
    assert kept_state.is_completed() and [f["source"] for f in kept["flagged"]] == [uri]
    assert read_results(tmp_path / "dropped") == {}
    assert read_ledger(tmp_path / "dropped")[uri]["reason"] == "page_error_rate"
    assert dropped_state.is_failed() and dropped["pdfs_failed"] == 1


def test_server_unavailable_after_the_deadline(tmp_path: Path, start_sim: Any) -> None:
    """A server that lists the model (so the preflight lets the run start) but answers
    every page with 503: past the deadline the PDF is recorded, naming the server and why."""
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.pdf").write_bytes(samples.text_pdf(2))
    busy = start_sim(profile="ci", reject_status_every=1)
    state, summary = run_flow(
        sources=[str(src)], workspace=str(tmp_path / "ws"),
        server_url=busy.base_url, gate_enabled=False,
        server_unavailable_after_seconds=1.0,
    )
    record = read_ledger(tmp_path / "ws")[str(src / "a.pdf")]
    assert record["reason"] == "server_unavailable"
    assert f"{busy.base_url}/chat/completions: HTTP 503" in record["detail"]
    assert state.is_failed() and summary["failed"][0]["reason"] == "server_unavailable"
    assert read_results(tmp_path / "ws") == {}


def test_s3_slow_down_for_a_while_is_retried_and_access_denied_is_recorded(
    s3_proxy: Any, s3_bucket: str, s3_client: Any, start_sim: Any
) -> None:
    """Through a proxy that throttles everything at first, then fails every 7th request."""
    for i in range(6):
        s3_client.put_object(Bucket=s3_bucket, Key=f"in/d{i}.pdf",
                             Body=samples.text_pdf(2, title=f"D{i}", seed=i))
    s3_client.put_object(Bucket=s3_bucket, Key="in/denied.pdf", Body=samples.text_pdf(1))
    sim = start_sim(profile="ci")
    s3_proxy.plan.deny("/in/denied.pdf")
    # The first 3 requests are throttled, whichever they are: ten attempts
    # (pagegate.io.storage) outlast them, even if all 3 are one request's.
    s3_proxy.plan.slow_down_first(3)
    s3_proxy.plan.unavailable_every(7)

    state, summary = run_flow(sources=[f"s3://{s3_bucket}/in/"],
                              workspace=f"s3://{s3_bucket}/out", server_url=sim.base_url,
                              pages_per_group=4)

    keys = [o["Key"] for o in s3_client.list_objects_v2(Bucket=s3_bucket, Prefix="out/")["Contents"]]
    results = [k for k in keys if k.startswith("out/results/")]
    ledger = [json.loads(s3_client.get_object(Bucket=s3_bucket, Key=k)["Body"].read())
              for k in keys if k.startswith("out/ledger/")]
    injected = dict(s3_proxy.plan.injected)
    assert injected.get("SlowDown", 0) == 3 and injected.get("ServiceUnavailable", 0) >= 1
    assert len(results) == 6 and summary["pdfs_ok"] == 6
    assert [(r["source"], r["reason"], r["extra"]) for r in ledger] == [
        (f"s3://{s3_bucket}/in/denied.pdf", "download_failed", {"s3_code": "AccessDenied"})
    ]
    assert state.is_failed() and summary["pdfs_failed"] == 1
    print(f"S3 faults: PDFs in 7, results out {len(results)}, duplicates 0, ledger "
          f"{len(ledger)} (download_failed AccessDenied); S3 requests {s3_proxy.plan.requests}, "
          f"injected {injected}")
