"""Shards: content-defined cuts, stable ids, manifests, run keys; the planner's verdicts."""

from __future__ import annotations

import itertools
import statistics

import pytest

from pagegate.scale.estimate import PageModel
from pagegate.scale.plan import PlannedShard, ScalePlan
from pagegate.scale.shards import (
    ListedPdf,
    Shard,
    iter_shards,
    manifest_key,
    manifest_text,
    manifest_uris,
    pdf_load,
    shard_id,
    shard_run_key,
)
from pagegate.scale.summary import FailedPdf, ShardOutcome, failure_message, planner_markdown
from pagegate.scale.watch import RunView, Verdict, is_dead, judge, launch_slots
from pagegate.server.target import DEFAULT_SERVER_URL, node_server_url


def listing(n: int, pages: int = 10, start: int = 0) -> list[ListedPdf]:
    return [ListedPdf(f"s3://b/in/{i:07d}.pdf", pages, pages * 1000) for i in range(start, start + n)]


def cut(pdfs: list[ListedPdf], target_pages: int = 500, target_pdfs: int = 1_000) -> list[Shard]:
    return list(iter_shards(pdfs, target_pages=target_pages, target_pdfs=target_pdfs))


# ----------------------------------------------------------------------------- ids and keys


def test_a_shard_id_ignores_order_and_keeps_uris_apart() -> None:
    assert shard_id(["a", "b"]) == shard_id(["b", "a"])
    assert shard_id(["ab", "c"]) != shard_id(["a", "bc"])
    assert shard_id(["a"]).startswith("s") and len(shard_id(["a"])) == 17


def test_the_run_key_follows_workspace_shard_and_salt() -> None:
    key = shard_run_key("s3://b/out", "s1")
    assert key == shard_run_key("s3://b/out/", "s1")
    assert len({key, shard_run_key("s3://b/other", "s1"), shard_run_key("s3://b/out", "s2"),
                shard_run_key("s3://b/out", "s1", salt="2026-11-30")}) == 4


def test_a_manifest_is_a_source_list_of_the_shard_uris() -> None:
    shard = cut(listing(30))[0]
    text = manifest_text(shard)
    assert text.startswith("# pagegate shard ")
    assert manifest_uris(text) == list(shard.uris)
    assert manifest_key(shard.id) == f"shards/{shard.id}.txt"


# ----------------------------------------------------------------------------- cutting


def test_every_pdf_lands_in_exactly_one_shard_in_listing_order() -> None:
    pdfs = listing(5_000)
    shards = cut(pdfs)
    assert [u for s in shards for u in s.uris] == [p.uri for p in pdfs]
    assert [s.index for s in shards] == list(range(len(shards)))
    assert all(s.id == shard_id(s.uris) for s in shards)
    assert sum(s.estimated_pages for s in shards) == 50_000
    assert sum(s.bytes for s in shards) == 50_000_000


def test_shards_average_the_target_and_never_pass_twice_it() -> None:
    shards = cut(listing(20_000), target_pages=500)  # 10 pages per PDF: 50 PDFs a shard
    pages = [s.estimated_pages for s in shards[:-1]]
    assert 0.8 * 500 < statistics.mean(pages) < 1.2 * 500
    assert min(pages) >= 250 and max(pages) <= 1_000


def test_the_pdf_target_binds_for_small_pdfs() -> None:
    shards = cut(listing(20_000, pages=1), target_pages=10_000, target_pdfs=100)
    sizes = [len(s) for s in shards[:-1]]
    assert 80 < statistics.mean(sizes) < 120 and max(sizes) <= 200


def test_a_pdf_larger_than_twice_the_target_ends_its_shard() -> None:
    pdfs = [*listing(3), ListedPdf("s3://b/in/huge.pdf", 5_000), *listing(3, start=10)]
    shards = cut(pdfs, target_pages=500)
    assert shards[0].uris[-1] == "s3://b/in/huge.pdf"
    assert pdf_load(5_000, target_pages=500, target_pdfs=1_000) == 10.0


@pytest.mark.parametrize("where", [7, 2_500, 4_990])
def test_a_key_added_between_two_listings_changes_only_nearby_shards(where: int) -> None:
    before = listing(5_000)
    after = [*before[:where], ListedPdf(before[where].uri + ".new.pdf", 10), *before[where:]]
    ids_before = {s.id for s in cut(before)}
    ids_after = {s.id for s in cut(after)}
    assert len(ids_before) > 80
    assert len(ids_before - ids_after) <= 2  # consecutive counting would change every later one


def test_a_key_removed_between_two_listings_changes_only_nearby_shards() -> None:
    before = listing(5_000)
    after = before[:1_234] + before[1_235:]
    assert len({s.id for s in cut(before)} - {s.id for s in cut(after)}) <= 2


def test_cutting_streams() -> None:
    endless = (ListedPdf(f"s3://b/{i}.pdf", 10) for i in itertools.count())
    first = next(iter_shards(endless, target_pages=100, target_pdfs=100))
    assert 5 <= len(first) <= 20


@pytest.mark.parametrize(("pages", "pdfs"), [(0, 10), (10, 0)])
def test_targets_must_be_positive(pages: int, pdfs: int) -> None:
    with pytest.raises(ValueError):
        cut(listing(3), target_pages=pages, target_pdfs=pdfs)


# ----------------------------------------------------------------------------- verdicts

NOW = 10_000.0


@pytest.mark.parametrize(
    ("view", "retries_left", "verdict"),
    [
        (RunView("COMPLETED", 0), 2, Verdict.COMPLETED),
        (RunView("CANCELLED", 0), 2, Verdict.CANCELLED),
        (RunView("FAILED", 0), 2, Verdict.FAILED),
        (RunView("FAILED", 0, preexisting=True), 1, Verdict.RETRY),
        (RunView("FAILED", 0, preexisting=True), 0, Verdict.FAILED),
        (RunView("CRASHED", NOW), 1, Verdict.RETRY),
        (RunView("CRASHED", NOW), 0, Verdict.LOST),
        (RunView("SCHEDULED", 0), 2, Verdict.WAIT),  # waiting for a worker is not death
        (RunView("PAUSED", 0), 2, Verdict.WAIT),
        (RunView("RUNNING", NOW - 500, last_heartbeat=NOW - 10), 2, Verdict.WAIT),
        (RunView("RUNNING", NOW - 500, last_heartbeat=NOW - 61), 2, Verdict.RETRY),
        (RunView("RUNNING", NOW - 500, last_heartbeat=NOW - 61), 0, Verdict.LOST),
        (RunView("RUNNING", NOW - 500), 2, Verdict.WAIT),  # never beat: cannot judge
        (RunView("RUNNING", NOW - 5, last_heartbeat=NOW - 400), 2, Verdict.WAIT),  # retried since
        (RunView("PENDING", NOW - 30), 2, Verdict.WAIT),
        (RunView("PENDING", NOW - 61), 2, Verdict.RETRY),
    ],
)
def test_judge(view: RunView, retries_left: int, verdict: Verdict) -> None:
    assert judge(view, now=NOW, stale_after=60, retries_left=retries_left) is verdict


@pytest.mark.parametrize("stale_after", [None, 0])
def test_without_a_staleness_limit_nothing_is_dead(stale_after: float | None) -> None:
    view = RunView("RUNNING", 0, last_heartbeat=1)
    assert not is_dead(view, now=NOW, stale_after=stale_after)
    assert judge(view, now=NOW, stale_after=stale_after, retries_left=2) is Verdict.WAIT


@pytest.mark.parametrize(
    ("active", "waiting", "limit", "slots"), [(0, 10, 4, 4), (3, 10, 4, 1), (4, 10, 4, 0), (0, 2, 4, 2), (5, 9, 4, 0)]
)
def test_launch_slots(active: int, waiting: int, limit: int, slots: int) -> None:
    assert launch_slots(active, waiting, limit) == slots


# ----------------------------------------------------------------------------- node and report


@pytest.mark.parametrize(
    ("env", "url"),
    [({}, DEFAULT_SERVER_URL), ({"PAGEGATE_SERVER_URL": "  "}, DEFAULT_SERVER_URL),
     ({"PAGEGATE_SERVER_URL": "http://127.0.0.1:8001/v1"}, "http://127.0.0.1:8001/v1")],
)
def test_the_node_server_comes_from_the_environment(env: dict[str, str], url: str) -> None:
    assert node_server_url(env) == url


def _outcomes() -> tuple[ScalePlan, list[ShardOutcome], dict[str, list[FailedPdf]]]:
    shards = [PlannedShard(f"s{i}", i, 3, 30, 3_000, f"s3://b/out/shards/s{i}.txt") for i in range(3)]
    plan = ScalePlan(tuple(shards), PageModel(0.01, 3), None)
    outcomes = [
        ShardOutcome(shards[0], "completed", "id0", "shard-0"),
        ShardOutcome(shards[1], "failed", "id1", "shard-1"),
        ShardOutcome(shards[2], "lost", "id2", "shard-2", retries=2),
    ]
    failed = {"s1": [FailedPdf("s3://b/in/x.pdf", "not_a_pdf")], "s2": []}
    return plan, outcomes, failed


def test_the_failure_message_names_failed_shards_and_their_pdfs() -> None:
    _, outcomes, failed = _outcomes()
    assert failure_message(outcomes, failed) == (
        "2 of 3 shard(s) failed: s1 (failed), s2 (lost); 1 PDF(s) not done: s3://b/in/x.pdf (not_a_pdf)"
    )


def test_the_summary_lists_every_shard_and_the_pdfs_not_done() -> None:
    plan, outcomes, failed = _outcomes()
    text = planner_markdown(plan, outcomes, failed, elapsed_seconds=12.0, planning_seconds=1.5)
    assert "| shards | 3 (1 completed, 2 not) |" in text
    assert "| bytes per page (fit) | 100 from 3 sampled PDF(s) |" in text
    assert "| s2 | 3 | 30 | lost | 2 | shard-2 |" in text
    assert "| s1 | s3://b/in/x.pdf | not_a_pdf |" in text
    assert "| s2 | (none found uncommitted) | lost |" in text
    assert "not measured" in text
