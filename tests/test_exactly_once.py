"""Exactly-once building blocks, without processes: workspace commit/ledger rules, the
pending plan, cache keys, reprocess selection, result storage, group outcomes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from prefect.states import Completed, Crashed, Failed

from pagegate import samples
from pagegate.io.local import LocalStore
from pagegate.ocr.outcomes import GroupOutcome, PdfOutcome
from pagegate.output.ledger import FailureRecord, result_key
from pagegate.output.workspace import Workspace
from pagegate.plan.groups import Group
from pagegate.plan.pending import plan_pending, plan_uris
from pagegate.plan.reprocess import check_reasons, select_for_reprocess
from pagegate.tasks.cache_keys import group_cache_key, plan_cache_key
from pagegate.tasks.ocr_group import FailedGroup, group_outcome
from pagegate.tasks.result_storage import S3ResultStorage, resolve_result_storage

AT = "2026-03-25T10:00:00+00:00"
DOC = {"id": "x", "text": "hello", "metadata": {}, "attributes": {}}


def record(source: str, reason: str = "server_unavailable") -> FailureRecord:
    return FailureRecord(source=source, reason=reason, detail="d", at=AT)


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(LocalStore(tmp_path / "ws"))


# --------------------------------------------------------------------------- workspace


def test_commit_clears_an_earlier_failure(ws: Workspace) -> None:
    ws.record_failure(record("a.pdf"))
    assert ws.has_failure("a.pdf")
    ws.commit_document("a.pdf", DOC, markdown=False)
    assert ws.is_committed("a.pdf") and not ws.has_failure("a.pdf")


def test_a_failure_written_after_an_overlapping_commit_is_taken_back(ws: Workspace) -> None:
    """Run B commits the PDF; run A, which failed on it meanwhile, writes its record late."""
    ws.commit_document("a.pdf", DOC, markdown=False)
    ws.record_failure(record("a.pdf"))
    assert ws.is_committed("a.pdf")
    assert not ws.has_failure("a.pdf")
    assert list(ws.iter_failures()) == []


def test_a_failure_of_an_uncommitted_pdf_stays(ws: Workspace) -> None:
    ws.record_failure(record("a.pdf", "unreadable"))
    assert [r.reason for r in ws.iter_failures()] == ["unreadable"]


def test_flagged_commit_keeps_its_page_error_rate_record(ws: Workspace) -> None:
    flag = record("a.pdf", "page_error_rate")
    ws.commit_document("a.pdf", DOC, markdown=True, flag=flag)
    assert ws.is_committed("a.pdf")
    assert [r.reason for r in ws.iter_failures()] == ["page_error_rate"]
    # a dropped-again record beside the old flagged document is kept too
    ws.record_failure(flag)
    assert ws.has_failure("a.pdf")
    # and a clean commit later removes it
    ws.commit_document("a.pdf", DOC, markdown=False)
    assert not ws.has_failure("a.pdf")


def test_an_exclusive_commit_leaves_the_first_result_and_markdown_that_matches_it(
    ws: Workspace,
) -> None:
    """Two runs converted the same PDF (one paused inside a write past its claim): the
    first result stands, and the second run's markdown, written just before its result
    was refused, is put back to the first one's text."""
    first = {**DOC, "text": "read by the first run"}
    assert ws.commit_document("a.pdf", first, markdown=True, exclusive=True) is not None
    second = {**DOC, "text": "read by the second run"}
    assert ws.commit_document("a.pdf", second, markdown=True, exclusive=True) is None
    assert json.loads(ws.store.read_bytes(result_key("a.pdf")))["text"] == first["text"]
    (md,) = [i.key for i in ws.store.list("markdown/")]
    assert ws.store.read_bytes(md).decode() == first["text"]
    # Without `exclusive` (reprocess) the result is replaced, as meant.
    assert ws.commit_document("a.pdf", second, markdown=True) is not None
    assert ws.store.read_bytes(md).decode() == second["text"]


def test_results_are_keyed_by_source_so_repeated_commits_never_duplicate(ws: Workspace) -> None:
    for _ in range(3):
        ws.commit_document("s3://b/a.pdf", DOC, markdown=False)
    keys = list(ws.iter_result_keys())
    assert keys == [result_key("s3://b/a.pdf")]
    text = ws.store.read_bytes(keys[0]).decode()
    assert text.count("\n") == 1 and json.loads(text)["text"] == "hello"


# --------------------------------------------------------------------------- pending plan


def write_pdfs(folder: Path, names: list[str], pages: int = 2) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names:
        path = folder / name
        path.write_bytes(samples.text_pdf(pages, title=name))
        paths.append(str(path))
    return paths


def test_pending_plan_leaves_out_committed_pdfs_and_picks_up_new_ones(
    tmp_path: Path, ws: Workspace
) -> None:
    first = write_pdfs(tmp_path / "in", ["a.pdf", "b.pdf", "c.pdf"])
    plan = plan_pending([str(tmp_path / "in")], workspace=ws, pages_per_group=4, s3_client=None)
    assert plan.already_done == 0 and plan.pdfs == 3 and plan.pages == 6
    for uri in first:
        ws.commit_document(uri, DOC, markdown=False)
    new = write_pdfs(tmp_path / "in", ["d.pdf"], pages=3)  # a new PDF lands

    again = plan_pending([str(tmp_path / "in")], workspace=ws, pages_per_group=4, s3_client=None)

    assert again.already_done == 3
    assert [list(g.uris) for g in again.groups] == [new]
    assert again.pages == 3


def test_pending_plan_counts_encrypted_pdfs_with_the_password_and_plain_ones_without(
    tmp_path: Path,
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "locked.pdf").write_bytes(samples.encrypted_pdf("secret"))
    (src / "plain.pdf").write_bytes(samples.text_pdf(3))
    plan = plan_pending([str(src)], workspace=None, pages_per_group=100, s3_client=None,
                        password="secret")
    assert plan.pages == 2 + 3  # neither is weighted as "could not be opened" (1)


def test_uri_plan_takes_exactly_the_list_once(tmp_path: Path) -> None:
    a, b = write_pdfs(tmp_path / "in", ["a.pdf", "b.pdf"])
    plan = plan_uris([b, a, b], pages_per_group=100, s3_client=None)
    assert [list(g.uris) for g in plan.groups] == [[b, a]]


# --------------------------------------------------------------------------- cache keys


def test_cache_keys_are_stable_within_a_run_and_differ_across_runs() -> None:
    assert group_cache_key("run-1", "g1") == group_cache_key("run-1", "g1")
    assert group_cache_key("run-1", "g1") != group_cache_key("run-2", "g1")
    assert group_cache_key("run-1", "g1") != group_cache_key("run-1", "g2")
    assert plan_cache_key("r", ["s3://b/in/"], 500) == plan_cache_key("r", ["s3://b/in/"], 500)
    assert plan_cache_key("r", ["s3://b/in/"], 500) != plan_cache_key("r", ["s3://b/in/"], 400)
    assert plan_cache_key("r", ["a", "b"], 5) != plan_cache_key("r", ["ab"], 5)


# --------------------------------------------------------------------------- reprocess selection


def test_selection_filters_reasons_and_drops_stale_records() -> None:
    records = [
        record("a.pdf", "server_unavailable"),
        record("b.pdf", "unreadable"),
        record("c.pdf", "page_error_rate"),   # committed, flagged: redo it
        record("d.pdf", "server_unavailable"),  # committed since: stale
    ]
    committed = {"c.pdf", "d.pdf"}

    def pick(reasons: list[str] | None) -> list[str]:
        return select_for_reprocess(records, only_reasons=reasons, is_committed=committed.__contains__)

    assert pick(None) == ["a.pdf", "b.pdf", "c.pdf"]
    assert pick(["server_unavailable"]) == ["a.pdf"]
    assert pick(["page_error_rate", "unreadable"]) == ["b.pdf", "c.pdf"]


def test_unknown_reason_is_an_error() -> None:
    with pytest.raises(ValueError, match="server_unavialable"):
        check_reasons(["server_unavialable"])


# --------------------------------------------------------------------------- result storage


def test_result_storage_specs(tmp_path: Path) -> None:
    async def resolve(spec: str | None) -> Any:
        return await resolve_result_storage(spec)

    assert asyncio.run(resolve(None)) is None
    assert asyncio.run(resolve("  ")) is None
    assert asyncio.run(resolve(str(tmp_path))) == tmp_path
    assert asyncio.run(resolve(f"file://{tmp_path}")) == tmp_path
    assert asyncio.run(resolve("s3-bucket/ocr-results")) == "s3-bucket/ocr-results"
    with pytest.raises(ValueError, match="expected"):
        asyncio.run(resolve("not a spec"))


def test_s3_result_storage_round_trip(s3_bucket: str, s3_client: Any) -> None:
    storage = S3ResultStorage(basepath=f"s3://{s3_bucket}/prefect-results/")
    assert storage.write_path("key-1", b"payload").endswith("/prefect-results/key-1")
    assert asyncio.run(storage.aread_path("key-1")) == b"payload"
    body = s3_client.get_object(Bucket=s3_bucket, Key="prefect-results/key-1")["Body"].read()
    assert body == b"payload"


# --------------------------------------------------------------------------- group outcomes

GROUP = Group(id="g1", uris=("a.pdf", "b.pdf"), pages=4)
OK = GroupOutcome("g1", (PdfOutcome("a.pdf", "ok", pages=2), PdfOutcome("b.pdf", "ok", pages=2)))
HALF = GroupOutcome(
    "g1", (PdfOutcome("a.pdf", "ok", pages=2), PdfOutcome("b.pdf", "failed", reason="unreadable"))
)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (Completed(data=OK), OK),
        (Completed(data=OK, name="Cached"), OK),
        (Failed(data=FailedGroup(HALF)), HALF),
    ],
)
def test_group_outcome_reads_every_kind_of_final_state(state: Any, expected: GroupOutcome) -> None:
    assert asyncio.run(group_outcome(state, GROUP)) == expected


def test_a_crashed_group_counts_every_pdf_as_failed() -> None:
    outcome = asyncio.run(group_outcome(Crashed(message="worker died"), GROUP))
    assert [(p.uri, p.status, p.reason) for p in outcome.pdfs] == [
        ("a.pdf", "failed", "internal_error"), ("b.pdf", "failed", "internal_error")
    ]
    assert "worker died" in (outcome.pdfs[0].detail or "")


def test_failed_group_repr_is_short() -> None:
    assert repr(FailedGroup(HALF)) == "FailedGroup(g1: 1 of 2 PDFs failed)"

