"""pagegate.pdf.pool: worker processes that keep documents open, and what a crash, a hang
or a memory bomb costs (one request, one worker restart; never the caller)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from pagegate import samples
from pagegate.errors import (
    CorruptPdfError,
    EncryptedPdfError,
    InputError,
    NotAPdfError,
    RenderFailedError,
)
from pagegate.pdf.pool import PoolSettings, RenderPool, usable_cores
from pagegate.pdf.reader import render_page_png
from pagegate.pdf.wire import PdfSource
from pagegate.samples.fuzz import content_bomb
from pagegate.samples.raw import pages_pdf
from tests.fault_worker import CRASH, HANG

FAULT_WORKER = [sys.executable, str(Path(__file__).with_name("fault_worker.py"))]
T = TypeVar("T")


def with_pool(settings: PoolSettings, body: Callable[[RenderPool], Awaitable[T]],
              *, faults: bool = False) -> T:
    async def run() -> T:
        async with RenderPool(settings, command=FAULT_WORKER if faults else None) as pool:
            return await body(pool)

    return asyncio.run(run())


def test_the_default_worker_count_is_the_usable_cores() -> None:
    assert PoolSettings().worker_count == usable_cores() >= 1
    assert PoolSettings(workers=3).worker_count == 3
    with pytest.raises(ValueError):
        PoolSettings(workers=0)


def test_pages_render_as_in_process_and_each_worker_gets_the_bytes_once() -> None:
    data = samples.text_pdf(6, title="Pool")
    source = PdfSource("a.pdf", data=data)

    async def body(pool: RenderPool) -> tuple[list[bytes], str, int]:
        info = await pool.inspect(source, password=None, max_pages=None)
        assert info.page_count == 6 and info.engine == "pdfium"
        pages = await asyncio.gather(*(pool.render(source, i, rotation=0) for i in range(6)))
        text = await pool.text(source, 2)
        return [p.png for p in pages], text, pool.stats.bytes_sent

    pngs, text, sent = with_pool(PoolSettings(workers=2), body)
    assert pngs == [render_page_png(data, i).png for i in range(6)]
    assert text.startswith("Pool page 3")
    assert sent <= 2 * len(data)  # at most once per worker, not once per page


def test_input_errors_come_back_with_their_class_and_source() -> None:
    async def body(pool: RenderPool) -> list[type[BaseException]]:
        found: list[type[BaseException]] = []
        for name, data in {"html": samples.html_as_pdf(), "locked": samples.encrypted_pdf(),
                           "cut": samples.truncated_pdf()}.items():
            with pytest.raises((NotAPdfError, EncryptedPdfError, CorruptPdfError)) as caught:
                await pool.inspect(PdfSource(name, data=data), password=None, max_pages=None)
            assert caught.value.source == name
            found.append(type(caught.value))
        return found

    assert with_pool(PoolSettings(workers=1), body) == [
        NotAPdfError, EncryptedPdfError, CorruptPdfError]


def test_a_password_is_used_only_where_needed_and_rendering_then_uses_it() -> None:
    async def body(pool: RenderPool) -> tuple[str | None, str | None, int]:
        locked = PdfSource("locked", data=samples.encrypted_pdf("pw"))
        plain = PdfSource("plain", data=samples.text_pdf(1))
        locked_info = await pool.inspect(locked, password="pw", max_pages=None)
        plain_info = await pool.inspect(plain, password="pw", max_pages=None)
        page = await pool.render(PdfSource("locked", data=locked.data, password="pw"), 1,
                                 rotation=0)
        return locked_info.password, plain_info.password, page.height

    assert with_pool(PoolSettings(workers=1), body) == ("pw", None, 1288)


def test_a_file_on_disk_is_opened_by_path(tmp_path: Path) -> None:
    path = tmp_path / "big.pdf"
    path.write_bytes(samples.text_pdf(3))
    source = PdfSource("big.pdf", path=str(path))

    async def body(pool: RenderPool) -> tuple[int, int, int]:
        info = await pool.inspect(source, password=None, max_pages=None)
        page = await pool.render(source, 2, rotation=0)
        return info.page_count, page.height, pool.stats.bytes_sent

    assert with_pool(PoolSettings(workers=1), body) == (3, 1288, 0)


def test_a_planted_crash_and_hang_cost_one_page_each_and_the_workers_come_back() -> None:
    data = pages_pdf(["Page one", f"Page two {CRASH}", f"Page three {HANG}", "Page four"])
    source = PdfSource("faulty.pdf", data=data)

    async def body(pool: RenderPool) -> tuple[list[str], str, str, int, int, int]:
        await pool.inspect(source, password=None, max_pages=None)
        outcomes = []
        for page in range(4):
            try:
                outcomes.append(f"png {(await pool.render(source, page, rotation=0)).height}")
            except RenderFailedError as exc:
                outcomes.append(f"{exc.reason}: {exc}")
        crash_text = await pool.text(source, 1)
        hang_text = await pool.text(source, 2)
        after = await pool.render(PdfSource("next.pdf", data=samples.text_pdf(1)), 0, rotation=0)
        return (outcomes, crash_text, hang_text, after.height, pool.stats.crashes,
                pool.stats.timeouts)

    outcomes, crash_text, hang_text, after, crashes, timeouts = with_pool(
        # 20 s decides hang from page for every request, which no page here takes however
        # loaded the machine; only the planted hang pays it.
        PoolSettings(workers=1, timeout_seconds=20.0, max_losses=3), body, faults=True)
    assert outcomes[0] == outcomes[3] == "png 1288"
    # (SIGSEGV), or "exit status 255" where another part of the process reaped the child
    # first and asyncio could not learn its status.
    assert outcomes[1].startswith("render_failed: the render worker crashed (")
    assert outcomes[2].startswith("render_failed: the render worker hung")
    assert crash_text == f"Page two {CRASH}" and hang_text == f"Page three {HANG}"
    assert (after, crashes, timeouts) == (1288, 1, 1)


def test_a_document_that_keeps_killing_workers_is_no_longer_rendered() -> None:
    data = pages_pdf([f"{CRASH} {n}" for n in range(5)])
    source = PdfSource("poison.pdf", data=data)

    async def body(pool: RenderPool) -> tuple[list[str], int]:
        await pool.inspect(source, password=None, max_pages=None)
        reasons = []
        for page in range(5):
            try:
                await pool.render(source, page, rotation=0)
            except (RenderFailedError, CorruptPdfError) as exc:
                reasons.append(exc.reason)
        return reasons, pool.stats.crashes

    reasons, crashes = with_pool(PoolSettings(workers=1, max_losses=2), body, faults=True)
    assert reasons == ["render_failed", "render_failed", "unreadable", "unreadable", "unreadable"]
    assert crashes == 2


def test_a_decompression_bomb_hits_the_memory_limit_in_its_worker_only() -> None:
    source = PdfSource("bomb.pdf", data=content_bomb(inflated_mb=384))

    async def body(pool: RenderPool) -> tuple[str, int, int]:
        # Loading page 1 to check it parses its content: the inspection may already hit
        # the limit, and then pypdf alone (which inflates nothing to count) inspects it.
        info = await pool.inspect(source, password=None, max_pages=None)
        with pytest.raises(InputError):
            await pool.render(source, 0, rotation=0)
        with pytest.raises(InputError):  # pypdf gives up too (its inflate limit, or ours)
            await pool.text(source, 0)
        after = await pool.render(PdfSource("ok.pdf", data=samples.text_pdf(1)), 0, rotation=0)
        return info.engine, pool.stats.crashes + pool.stats.out_of_memory, after.height

    # 256 MB: the worker's own libraries take ~160 MB of address space (numpy alone ~120)
    engine, lost, after = with_pool(PoolSettings(workers=1, memory_limit_mb=256,
                                                 max_losses=1), body)
    assert engine in ("pdfium", "pypdf") and lost >= 1 and after == 1288


def test_a_cancelled_caller_leaves_the_worker_in_step() -> None:
    """A page task cancelled mid-render (a sibling failed) must not desynchronise the pipe."""
    data = samples.scanned_pdf(3)
    source = PdfSource("scan.pdf", data=data)

    async def body(pool: RenderPool) -> list[int]:
        task = asyncio.ensure_future(pool.render(source, 0, rotation=0))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        pages = [await pool.render(source, i, rotation=0) for i in (1, 2)]
        return [p.height for p in pages]

    assert with_pool(PoolSettings(workers=1), body) == [1288, 1288]


def test_forget_closes_the_document_in_its_worker() -> None:
    source = PdfSource("a.pdf", data=samples.text_pdf(2))

    async def body(pool: RenderPool) -> tuple[int, int]:
        await pool.render(source, 0, rotation=0)
        pool.forget(source)
        await pool.render(PdfSource("b.pdf", data=samples.text_pdf(1)), 0, rotation=0)
        await pool.render(source, 1, rotation=0)  # opened again: its bytes go again
        return pool.stats.bytes_sent, len(source.data or b"")

    sent, size = with_pool(PoolSettings(workers=1), body)
    assert sent > 2 * size
