"""Planning counts pages in counting processes: a hostile file costs only its own count.

The planted faults come from tests/count_fault_worker.py, the real worker with a hang and
an unbounded allocation planted on marked files.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pagegate import samples
from pagegate.pdf import document
from pagegate.pdf.counter import CountSettings, PageCounter
from pagegate.pdf.wire import PdfSource
from pagegate.plan.pending import plan_pending, plan_uris
from tests.count_fault_worker import BOMB, HANG

FAULT_WORKER = [sys.executable, str(Path(__file__).with_name("count_fault_worker.py"))]


def drop(folder: Path, files: dict[str, bytes]) -> dict[str, str]:
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return {name: str(folder / name) for name in files}


def test_a_pdf_that_hangs_the_counter_and_one_that_eats_memory_cost_only_their_own_file(
    tmp_path: Path,
) -> None:
    uris = drop(tmp_path / "in", {
        "a.pdf": samples.text_pdf(3, seed=1),
        "b-hang.pdf": samples.text_pdf(4, seed=2) + b"\n%" + HANG + b"\n",
        "c-bomb.pdf": samples.text_pdf(5, seed=3) + b"\n%" + BOMB + b"\n",
        "d.pdf": samples.text_pdf(2, seed=4),
        "e-garbage.pdf": b"<html>not a pdf</html>",
    })
    # A worker maps ~210 MB before it reads a file: 384 MB stops the bomb within ~170 MB
    # of writes, so it dies of its limit well before the 3 s that end the hang.
    settings = CountSettings(workers=2, timeout_seconds=3.0, memory_limit_mb=384)
    with PageCounter(settings, command=FAULT_WORKER) as counter:
        plan = plan_pending([str(tmp_path / "in")], workspace=None, pages_per_group=1,
                            s3_client=None, counting=counter)
        stats = counter.stats

    # The plan finished with every file; the hostile ones each got a one-page group of
    # their own (their group task inspects them under the render pool's limits).
    by_uri = {g.uris[0]: g.pages for g in plan.groups}
    assert by_uri == {uris["a.pdf"]: 3, uris["b-hang.pdf"]: 1, uris["c-bomb.pdf"]: 1,
                      uris["d.pdf"]: 2, uris["e-garbage.pdf"]: 1}
    assert (stats.counted, stats.timeouts, stats.crashes, stats.unreadable) == (2, 1, 1, 1)
    # How many processes started depends on which files were left when one was lost:
    # the next test holds the replacement to its promise, in an order it fixes.


def test_a_lost_counting_process_is_replaced_for_the_files_left(tmp_path: Path) -> None:
    uris = drop(tmp_path / "in", {
        "hang.pdf": samples.text_pdf(4, seed=2) + b"\n%" + HANG + b"\n",
        "bomb.pdf": samples.text_pdf(5, seed=3) + b"\n%" + BOMB + b"\n",
        "a.pdf": samples.text_pdf(3, seed=1),
    })
    source = {name: PdfSource(uri, path=uri) for name, uri in uris.items()}
    # One process and one caller: each count after a lost one has work left for a
    # replacement, in this order whatever the machine's load.
    settings = CountSettings(workers=1, timeout_seconds=3.0, memory_limit_mb=384)
    with PageCounter(settings, command=FAULT_WORKER) as counter:
        assert [counter.count(source[n]) for n in ("a.pdf", "hang.pdf", "a.pdf")] == [3, None, 3]
        assert (counter.stats.timeouts, counter.stats.started) == (1, 2)
        assert [counter.count(source[n]) for n in ("bomb.pdf", "a.pdf")] == [None, 3]
        assert (counter.stats.crashes, counter.stats.started) == (1, 3)
        assert counter.stats.counted == 3


def test_the_run_process_parses_no_pdf_while_planning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("a PDF was parsed in the planner's own process")

    monkeypatch.setattr(document, "open_pdf", refuse)
    monkeypatch.setattr(document, "PdfReader", refuse)
    uris = drop(tmp_path / "in", {"a.pdf": samples.text_pdf(3), "b.pdf": samples.text_pdf(2)})
    plan = plan_uris([uris["b.pdf"], uris["a.pdf"]], pages_per_group=100, s3_client=None,
                     counting=CountSettings(workers=1))
    assert plan.pages == 5 and plan.pdfs == 2


def test_a_counter_answers_with_the_password_the_file_needs(tmp_path: Path) -> None:
    path = tmp_path / "locked.pdf"
    path.write_bytes(samples.encrypted_pdf("secret"))
    with PageCounter(CountSettings(workers=1)) as counter:
        locked = PdfSource(str(path), path=str(path))
        assert counter.count(locked, password="secret") == 2
        assert counter.count(locked, password=None) is None
