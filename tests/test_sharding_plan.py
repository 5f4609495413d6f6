"""Planning a scale-out job against moto's S3 server: sample, fit, cut, manifests, failures."""

from __future__ import annotations

import json
from typing import Any

from pagegate import samples
from pagegate.io.s3 import make_s3_client
from pagegate.io.sources import iter_sources
from pagegate.output.ledger import FailureRecord, ledger_key, record_to_json
from pagegate.output.workspace import Workspace
from pagegate.scale.failures import uncommitted_pdfs
from pagegate.scale.plan import plan_shards
from pagegate.scale.shards import manifest_uris
from pagegate.scale.summary import FailedPdf

PAGES = [1, 2, 3, 5, 8, 1, 2, 3, 5, 8, 13, 2]


def _upload(s3_client: Any, bucket: str) -> list[str]:
    uris = []
    for i, pages in enumerate(PAGES):
        key = f"in/d{i:02d}.pdf"
        s3_client.put_object(Bucket=bucket, Key=key, Body=samples.text_pdf(pages, seed=i))
        uris.append(f"s3://{bucket}/{key}")
    return uris


def test_a_plan_covers_the_listing_with_manifests_and_measures_its_estimate(
    s3_bucket: str, s3_client: Any
) -> None:
    uris = _upload(s3_client, s3_bucket)
    client = make_s3_client()
    workspace = Workspace.open(f"s3://{s3_bucket}/out", s3_client=client)
    plan = plan_shards(
        [f"s3://{s3_bucket}/in/"], workspace=workspace.store, target_pages=10, target_pdfs=100,
        s3_client=client, sample_size=len(PAGES),
    )
    assert plan.model.sample_pdfs == len(PAGES)
    assert plan.error is not None and plan.error.pdfs == len(PAGES)
    sizes = {i.uri: i.size or 0 for i in iter_sources([f"s3://{s3_bucket}/in/"], s3_client=client)}
    assert plan.model.pages_per_byte == sum(PAGES) / sum(sizes.values())
    # One text page is much the same size as another here, so the estimate is close.
    assert abs(plan.estimated_pages - sum(PAGES)) <= 0.25 * sum(PAGES)
    assert plan.error.total_relative_error < 0.25
    listed: list[str] = []
    for shard in plan.shards:
        text = workspace.store.read_bytes(f"shards/{shard.id}.txt").decode()
        assert shard.manifest == f"s3://{s3_bucket}/out/shards/{shard.id}.txt"
        assert len(manifest_uris(text)) == shard.pdfs
        listed += manifest_uris(text)
    assert listed == uris
    assert len(plan.shards) >= 2

    # The same listing planned again: the same shards (ids and manifests).
    again = plan_shards(
        [f"s3://{s3_bucket}/in/"], workspace=workspace.store, target_pages=10, target_pdfs=100,
        s3_client=client, sample_size=len(PAGES),
    )
    assert again.shards == plan.shards


def test_a_known_page_size_plans_without_sampling(s3_bucket: str, s3_client: Any) -> None:
    _upload(s3_client, s3_bucket)
    client = make_s3_client()
    store = Workspace.open(f"s3://{s3_bucket}/out", s3_client=client).store
    plan = plan_shards(
        [f"s3://{s3_bucket}/in/"], workspace=store, target_pages=1_000, target_pdfs=1_000,
        s3_client=client, bytes_per_page=10**12, write_manifests=False,
    )
    assert plan.error is None and plan.model.sample_pdfs == 0
    assert plan.estimated_pages == len(PAGES)  # every PDF at its one-page floor
    assert not store.exists(f"shards/{plan.shards[0].id}.txt")


def test_the_pdfs_not_done_of_a_shard_come_from_its_manifest_and_the_ledger(
    s3_bucket: str, s3_client: Any
) -> None:
    client = make_s3_client()
    workspace = Workspace.open(f"s3://{s3_bucket}/out", s3_client=client)
    done, failed, untouched = (f"s3://{s3_bucket}/in/{n}.pdf" for n in ("done", "bad", "lost"))
    workspace.store.write_bytes("shards/s1.txt", f"# shard\n{done}\n{failed}\n{untouched}\n".encode())
    workspace.commit_document(done, {"id": "x", "text": "t", "metadata": {}}, markdown=False)
    record = FailureRecord(failed, "not_a_pdf", "no header", "2026-11-30T12:00:00Z")
    workspace.store.write_bytes(ledger_key(failed), record_to_json(record).encode())

    missing = uncommitted_pdfs(workspace, f"s3://{s3_bucket}/out/shards/s1.txt", s3_client=client)
    assert missing == [FailedPdf(failed, "not_a_pdf"), FailedPdf(untouched, "not processed")]
    gone = uncommitted_pdfs(workspace, f"s3://{s3_bucket}/out/shards/nope.txt", s3_client=client)
    assert gone == [FailedPdf(f"s3://{s3_bucket}/out/shards/nope.txt", "manifest unreadable: NoSuchKey")]


def test_pagegate_plan_prints_the_shards_and_writes_their_manifests(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from pagegate.cli.app import app

    src = tmp_path / "in"
    samples.write_sample_corpus(src, good=12, include_bad=False)
    ws = tmp_path / "ws"
    result = CliRunner().invoke(
        app, ["plan", str(src), "--workspace", str(ws), "--pages-per-shard", "10", "--json"]
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["pdfs"] == 12 and plan["sampled"] == 12 and plan["error_total"] is not None
    listed = [u for s in plan["shards"] for u in manifest_uris((ws / "shards" / f"{s['id']}.txt").read_text())]
    assert listed == sorted(str(p) for p in src.iterdir())
