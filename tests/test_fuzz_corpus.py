"""The fuzz corpus through the production path: every PDF pdfium renders becomes a
document, every other one a ledger record naming both libraries, and planted crashes and
hangs cost one page each, never the run.

Runs `process_group` (intake, render pool, admission, the simulator over HTTP, commit)
on files written at test time (pagegate.samples.fuzz). Faults are planted by
tests/fault_worker.py, a worker that segfaults or sleeps on marked pages.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pypdfium2 as pdfium
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagegate import samples
from pagegate.admission.base import FixedLimit
from pagegate.config import RunConfig
from pagegate.ocr.job import process_group
from pagegate.ocr.outcomes import GroupOutcome
from pagegate.ocr.run import open_run_context, pool_settings
from pagegate.pdf.pool import PoolSettings, RenderPool
from pagegate.plan.groups import Group
from pagegate.samples.fuzz import BOMB_LIMIT_MB, FUZZ_KINDS, SLOW_KINDS, Expect
from pagegate.samples.raw import pages_pdf
from pagegate.sim.process import SimProcess
from tests.fault_worker import CRASH, HANG
from tests.helpers import read_ledger, read_results

FAULT_WORKER = [sys.executable, str(Path(__file__).with_name("fault_worker.py"))]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(profile="ci", extra_args=("--time-scale", "50")) as server:
        yield server


def run_group(paths: list[Path], workspace: Path, sim: SimProcess, *, faults: bool = False,
              shared: tuple[asyncio.AbstractEventLoop, RenderPool] | None = None,
              **overrides: Any) -> tuple[GroupOutcome, dict[str, int]]:
    """Process the files as one group; with `shared`, in that loop with that pool."""
    settings_: dict[str, Any] = {
        "use_gate": False, "max_concurrent_requests": 32, "render_workers": 2,
        # No kind here should hang: the production default, so a slow machine's image-bomb
        # render is not taken for one.
        "max_page_retries": 2, "render_timeout_seconds": 120.0,
        "render_memory_limit_mb": BOMB_LIMIT_MB, "max_page_error_rate": 0.0, **overrides,
    }
    config = RunConfig(sources=(str(workspace),), workspace=str(workspace),
                       server_url=sim.base_url, **settings_)

    async def run(pool: RenderPool) -> tuple[GroupOutcome, dict[str, int]]:
        async with httpx.AsyncClient() as http, open_run_context(
            config, FixedLimit(32), http=http, renderer=pool
        ) as ctx:
            outcome = await process_group(ctx, Group("fuzz", tuple(map(str, paths)), 0))
            stats = {"crashes": pool.stats.crashes, "timeouts": pool.stats.timeouts}
            return outcome, stats

    if shared is not None:
        loop, pool = shared
        return loop.run_until_complete(run(pool))

    async def own_pool() -> tuple[GroupOutcome, dict[str, int]]:
        async with RenderPool(pool_settings(config),
                              command=FAULT_WORKER if faults else None) as pool:
            return await run(pool)

    return asyncio.run(own_pool())


@pytest.fixture(scope="module")
def shared_pool() -> Iterator[tuple[asyncio.AbstractEventLoop, RenderPool]]:
    """One loop and one pool for the many small runs of the mutation test."""
    loop = asyncio.new_event_loop()
    pool = RenderPool(PoolSettings(workers=2, timeout_seconds=10.0,
                                   memory_limit_mb=BOMB_LIMIT_MB, target_longest_dim=64))
    loop.run_until_complete(pool.start())
    yield loop, pool
    loop.run_until_complete(pool.close())
    loop.close()


def pdfium_opens(data: bytes) -> bool:
    """The oracle for random damage (pdfium in this process: these are our own files)."""
    for raw in (data, b"%PDF-1.7\n" + data):
        try:
            doc = pdfium.PdfDocument(raw)
        except pdfium.PdfiumError:
            continue
        pages = len(doc)
        doc.close()
        if pages:
            return True
    return False


def check(name: str, expect: Expect, data: bytes, uri: str,
          results: Mapping[str, Any], ledger: Mapping[str, Any]) -> None:
    if expect.oracle:
        expect = Expect(pages=-1) if pdfium_opens(data) else Expect(reason="any")
    if expect.pages is not None:
        assert uri in results, f"{name}: no document ({ledger.get(uri)})"
        doc = results[uri]
        if expect.pages > 0:
            assert doc["metadata"]["pdf-total-pages"] == expect.pages, name
        fallback = doc["attributes"]["is_fallback_page"]
        assert all(fallback) if expect.fallback else not any(fallback), (name, fallback)
        if expect.fallback:
            assert ledger[uri]["reason"] == "page_error_rate", name  # committed, flagged
    else:
        assert uri not in results, f"{name}: a document from a file pdfium cannot open"
        record = ledger[uri]
        if expect.reason != "any":
            assert record["reason"] == expect.reason, (name, record)
        assert "pdfium: " in record["detail"] and "pypdf: " in record["detail"], record


@pytest.mark.slow
def test_every_fuzz_kind_ends_as_expected(tmp_path: Path, sim: SimProcess) -> None:
    src = tmp_path / "in"
    src.mkdir()
    made = {name: kind.make() for name, kind in FUZZ_KINDS.items()}
    paths = []
    for name, data in made.items():
        path = src / f"{name}.pdf"
        path.write_bytes(data)
        paths.append(path)
    assert len(FUZZ_KINDS) >= 20
    outcome, stats = run_group(paths, tmp_path / "ws", sim, target_longest_image_dim=256)
    results, ledger = read_results(tmp_path / "ws"), read_ledger(tmp_path / "ws")
    assert {p.uri for p in outcome.pdfs} == {str(p) for p in paths}
    for name, kind in FUZZ_KINDS.items():
        check(name, kind.expect, made[name], str(src / f"{name}.pdf"), results, ledger)
    print(f"fuzz corpus: {len(paths)} files, {len(results)} documents, "
          f"{len(set(ledger) - set(results))} ledger only, worker {stats}")


def test_the_quick_fuzz_kinds_end_as_expected(tmp_path: Path, sim: SimProcess) -> None:
    kinds = {n: k for n, k in FUZZ_KINDS.items() if n not in SLOW_KINDS}
    src = tmp_path / "in"
    src.mkdir()
    made = {name: kind.make() for name, kind in kinds.items()}
    for name, data in made.items():
        (src / f"{name}.pdf").write_bytes(data)
    run_group(sorted(src.iterdir()), tmp_path / "ws", sim, target_longest_image_dim=128)
    results, ledger = read_results(tmp_path / "ws"), read_ledger(tmp_path / "ws")
    for name, kind in kinds.items():
        check(name, kind.expect, made[name], str(src / f"{name}.pdf"), results, ledger)


def test_a_planted_crash_and_hang_cost_one_page_each_never_the_run(
    tmp_path: Path, sim: SimProcess
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    faulty = src / "faulty.pdf"
    faulty.write_bytes(pages_pdf(["First page", f"Second {CRASH}", f"Third {HANG}", "Fourth"]))
    plain = src / "plain.pdf"
    plain.write_bytes(samples.text_pdf(3, title="Plain"))
    # The timeout decides hang from page for every request: 20 s, which no page of these
    # takes however loaded the machine; the planted hang pays it once.
    outcome, stats = run_group([faulty, plain], tmp_path / "ws", sim, faults=True,
                               render_timeout_seconds=20.0)
    results, ledger = read_results(tmp_path / "ws"), read_ledger(tmp_path / "ws")
    doc = results[str(faulty)]
    assert doc["attributes"]["is_fallback_page"] == [False, True, True, False]
    assert f"Second {CRASH}" in doc["text"] and f"Third {HANG}" in doc["text"]
    assert ledger[str(faulty)]["reason"] == "page_error_rate"  # committed, flagged
    assert results[str(plain)]["attributes"]["is_fallback_page"] == [False] * 3
    assert [p.status for p in outcome.pdfs] == ["ok", "ok"]
    assert stats == {"crashes": 1, "timeouts": 1}


def _mutate(data: bytes, edits: list[tuple[int, int, bytes]], cut: int | None) -> bytes:
    out = bytearray(data)
    for position, length, insert in edits:
        at = position % (len(out) + 1)
        out[at : at + length] = insert
    return bytes(out[:cut] if cut is not None else out)


BASES = {"text": samples.text_pdf(2, title="Base"), "objstm": samples.broken_xref_pdf(),
         "rotated": samples.rotated_pdf(2), "locked": samples.owner_locked_pdf(1)}


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    base=st.sampled_from(sorted(BASES)),
    edits=st.lists(st.tuples(st.integers(0, 20_000), st.integers(0, 64),
                             st.binary(max_size=16)), max_size=6),
    cut=st.none() | st.integers(0, 20_000),
)
def test_any_mutated_input_ends_as_a_result_or_a_ledger_record(
    tmp_path: Path, sim: SimProcess, shared_pool: tuple[asyncio.AbstractEventLoop, RenderPool],
    base: str, edits: list[tuple[int, int, bytes]], cut: int | None,
) -> None:
    data = _mutate(BASES[base], edits, cut)
    case = Path(tempfile.mkdtemp(dir=tmp_path))  # one tmp_path serves every example
    (case / "in").mkdir()
    path = case / "in" / "mutated.pdf"
    path.write_bytes(data)
    outcome, _ = run_group([path], case / "ws", sim, shared=shared_pool, max_page_retries=1)
    results, ledger = read_results(case / "ws"), read_ledger(case / "ws")
    (pdf,) = outcome.pdfs
    assert pdf.status in ("ok", "failed")
    assert (str(path) in results) or (str(path) in ledger)
    if pdf.status == "failed":
        assert ledger[str(path)]["reason"] != "internal_error", ledger[str(path)]


def test_the_config_builds_the_pool_it_names() -> None:
    config = RunConfig(sources=("x",), workspace="w", render_workers=3,
                       render_timeout_seconds=9.0, render_memory_limit_mb=300)
    settings_ = pool_settings(config)
    assert (settings_.worker_count, settings_.timeout_seconds, settings_.memory_limit_mb) == (
        3, 9.0, 300)
    assert pool_settings(replace(config, render_workers=None)).workers is None
