"""Process a group and each of its PDFs end to end: skip if done, wait for the intake,
fetch, validate, OCR its pages, commit.

Every way a PDF can fail ends here as a ledger record and a `failed` outcome; nothing
propagates, so one bad PDF never stops its group or the run. The one exception is a
workspace that stopped taking writes (pagegate.ocr.halt): then every PDF not yet
committed ends `stopped`, with no record, for the rerun to do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from pagegate import __version__
from pagegate.config import RunConfig
from pagegate.errors import (
    ClaimLostError,
    DownloadError,
    InputError,
    ServerUnavailableError,
    SourceNotFoundError,
    StorageError,
    WriteRefusedError,
)
from pagegate.io.local import errno_code
from pagegate.io.storage import read_uri
from pagegate.io.store import S3_SCHEME
from pagegate.ocr.intake import Entry
from pagegate.ocr.outcomes import GroupOutcome, PdfOutcome
from pagegate.ocr.page import PdfDocument
from pagegate.ocr.run import RunContext
from pagegate.output.documents import (
    PageResult,
    build_dolma_document,
    document_id,
    layout_lines,
)
from pagegate.output.ledger import FailureRecord, record_for_page_error_rate, record_from_error
from pagegate.pdf.wire import PdfSource
from pagegate.plan.groups import Group
from pagegate.plan.pending import MissingSource
from pagegate.settle import gather_settled, settle

log = logging.getLogger("pagegate.pdf")


async def process_group(ctx: RunContext, group: Group) -> GroupOutcome:
    """All PDFs of the group at once: each is fetched when the run's intake lets it
    (pagegate.ocr.intake), and the admission gate decides how fast pages go out.

    Cancelled, it ends only when every PDF has: a commit under way is counted first.
    """
    outcomes = await gather_settled(process_pdf(ctx, uri, group.id) for uri in group.uris)
    return GroupOutcome(group_id=group.id, pdfs=tuple(outcomes))


def _utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


async def process_pdf(ctx: RunContext, uri: str, group_id: str) -> PdfOutcome:
    """OCR one PDF and commit it, or record why it could not be done."""
    workspace = ctx.workspace
    guard = _guard(ctx, group_id)
    try:
        ctx.halt.check()
        ctx.claims.check_lost(group_id)
        if ctx.config.skip_committed and await asyncio.to_thread(_is_done, ctx, uri):
            return PdfOutcome(uri=uri, status="skipped")
        async with ctx.intake.enter() as entry:
            ctx.halt.check()  # it may have tripped while this PDF waited its turn
            pages = await _fetch_and_ocr(ctx, uri, group_id, entry)
        dolma = build_dolma_document(
            source_uri=uri,
            pages=pages,
            model=ctx.config.model,
            profile=ctx.profile,
            now=datetime.now(UTC),
            pagegate_version=__version__,
        )
        fallback = sum(1 for p in pages if p.is_fallback)
        flag = _page_error_flag(ctx, uri, group_id, fallback, len(pages))
        if flag is not None and ctx.config.drop_on_page_errors:
            return await _record(ctx, flag)
        layout = layout_lines(dolma, pages) if ctx.config.layout else None
        await ctx.claims.ready(group_id)
        location = await _commit(ctx, lambda: workspace.commit_document(
            uri, dolma, markdown=ctx.config.markdown, markdown_root=ctx.config.markdown_root,
            flag=flag, layout=layout, guard=guard, exclusive=_exclusive(ctx.config),
        ))
        if location is None:  # another run committed it first (a pause inside a write)
            return PdfOutcome(uri=uri, status="skipped")
    except WriteRefusedError as exc:
        ctx.halt.trip(exc)
        return PdfOutcome(uri=uri, status="stopped")
    except ClaimLostError:  # another run has the group now: it does this PDF
        return PdfOutcome(uri=uri, status="handed_over")
    except (InputError, ServerUnavailableError, StorageError) as exc:  # a line, no traceback
        return await _fail(ctx, uri, group_id, exc)
    except Exception as exc:  # one bad PDF must never stop the run
        log.exception("unexpected error on %s", uri)
        return await _fail(ctx, uri, group_id, exc)
    if flag is not None:
        log.warning("committed %s with its fallback pages flagged: %s", uri, flag.detail)
    return PdfOutcome(
        uri=uri,
        status="ok",
        pages=len(pages),
        fallback_pages=fallback,
        input_tokens=sum(p.input_tokens for p in pages),
        output_tokens=sum(p.output_tokens for p in pages),
        reason=flag.reason if flag is not None else None,
        detail=flag.detail if flag is not None else None,
        location=location,
    )


async def _fetch_and_ocr(
    ctx: RunContext, uri: str, group_id: str, entry: Entry
) -> list[PageResult]:
    """Fetch, inspect (in a render worker) and OCR every page; the PDF's bytes, spooled
    copy and open documents in the workers are let go before this returns."""
    source, spooled = await _fetch(ctx, uri, entry)
    try:
        info = await ctx.renderer.inspect(
            source, password=ctx.config.pdf_password, max_pages=ctx.config.max_pages_per_pdf
        )
        source = replace(source, password=info.password, use_pdfium=info.engine == "pdfium")
        entry.fetched(info.page_count)
        if info.header_added:
            log.info("%s has no %%PDF- header; pdfium opened it with one added", uri)
        ctx.stats.pages_total += info.page_count
        doc = PdfDocument(uri, source, info.page_count)
        return await _ocr_all_pages(ctx, doc, group_id, entry)
    finally:
        ctx.renderer.forget(source)
        if spooled is not None:
            spooled.unlink(missing_ok=True)


async def _fetch(ctx: RunContext, uri: str, entry: Entry) -> tuple[PdfSource, Path | None]:
    """The PDF as a render worker opens it, and the spooled copy to delete afterwards.

    A local source is opened where it is: its bytes never pass through this process. A
    download is held in memory when it is small and fits the budget, else written to the
    run's spool folder first.
    """
    spool_over = int(ctx.config.spool_pdfs_over_mb * 2**20)
    if not uri.startswith(S3_SCHEME):
        path = Path(uri).expanduser().absolute()
        try:
            await asyncio.to_thread(path.stat)
        except OSError as exc:
            raise DownloadError(f"cannot read {path}: {exc}", source=str(path),
                                code=errno_code(exc)) from exc
        return PdfSource(uri, path=str(path)), None
    data = await asyncio.to_thread(read_uri, uri, s3_client=ctx.s3_client)
    if len(data) > spool_over or not ctx.intake.fits(len(data)):
        spooled = await asyncio.to_thread(_spool, ctx.spool_dir, uri, data)
        return PdfSource(uri, path=str(spooled)), spooled
    entry.hold(len(data))
    return PdfSource(uri, data=data), None


def _spool(directory: Path, uri: str, data: bytes) -> Path:
    path = directory / f"{document_id(uri)}.pdf"
    path.write_bytes(data)
    return path


def _is_done(ctx: RunContext, uri: str) -> bool:
    """Committed, unless this run redoes flagged documents and this one is flagged."""
    if not ctx.workspace.is_committed(uri):
        return False
    return not (ctx.config.redo_flagged and ctx.workspace.has_failure(uri))


def _page_error_flag(
    ctx: RunContext, uri: str, group_id: str, fallback: int, pages: int
) -> FailureRecord | None:
    """A page_error_rate record when too many pages fell back to the text layer (olmOCR's
    --max_page_error_rate test: fallback / pages > max), else None."""
    if pages == 0 or fallback / pages <= ctx.config.max_page_error_rate:
        return None
    return record_for_page_error_rate(
        uri,
        fallback_pages=fallback,
        pages=pages,
        max_rate=ctx.config.max_page_error_rate,
        at=_utc_now_iso(),
        group_id=group_id,
        run_id=ctx.config.run_id,
    )


async def _ocr_all_pages(
    ctx: RunContext, doc: PdfDocument, group_id: str, entry: Entry
) -> list[PageResult]:
    """All pages concurrently; if the server is gone for good, stop the siblings too."""

    async def page(index: int) -> PageResult:
        try:
            await ctx.claims.ready(group_id)  # no page goes out for a group that may be lost
            return await ctx.pages.run(doc, index, group_id)
        finally:
            entry.page_done()

    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(page(i)) for i in range(doc.page_count)]
    except* (ServerUnavailableError, WriteRefusedError, ClaimLostError) as group:
        raise group.exceptions[0] from None
    return [t.result() for t in tasks]


def _guard(ctx: RunContext, group_id: str | None) -> Callable[[], None]:
    """Checked before each write of a commit or a record: the run still holds the group
    (pagegate.claims.holder); else ClaimLostError, and nothing more is written."""
    return lambda: ctx.claims.fence(group_id)


def _exclusive(config: RunConfig) -> bool:
    """A run that skips committed PDFs creates results only where none exist; reprocess and
    --redo-flagged mean to replace them."""
    return config.skip_committed and not config.redo_flagged


async def _commit(ctx: RunContext, write: Callable[[], str | None]) -> str | None:
    """Commit in a thread and count it; a cancellation meanwhile still counts what lands.

    The thread cannot be stopped, so a run stopped mid-commit has that PDF committed
    anyway; counting it keeps the CLI's 'N PDFs committed' exact on Ctrl-C. That count
    is in before the run reports, because the group and the flow wait for every PDF
    when cancelled (pagegate.settle).
    """
    future = asyncio.ensure_future(asyncio.to_thread(write))
    try:
        location = await asyncio.shield(future)
    except asyncio.CancelledError:
        await settle([future])  # the write runs to its end whatever happens here
        if not future.cancelled() and future.exception() is None and future.result():
            ctx.stats.pdfs_done += 1
        raise
    ctx.stats.pdfs_done += location is not None
    return location


MISSING_GROUP = "sources"  # the group id of the records of source entries that named nothing


async def record_missing(ctx: RunContext, missing: Sequence[MissingSource]) -> GroupOutcome:
    """Ledger records for the source entries that named nothing; their outcomes as a group."""
    outcomes = []
    for entry in missing:
        error = SourceNotFoundError(entry.detail, source=entry.uri)
        outcomes.append(await _fail(ctx, entry.uri, MISSING_GROUP, error))
    return GroupOutcome(MISSING_GROUP, tuple(outcomes))


async def _fail(ctx: RunContext, uri: str, group_id: str, exc: BaseException) -> PdfOutcome:
    record = record_from_error(
        uri, exc, at=_utc_now_iso(), group_id=group_id, run_id=ctx.config.run_id
    )
    return await _record(ctx, record)


async def _record(ctx: RunContext, record: FailureRecord) -> PdfOutcome:
    """Write the ledger record of a PDF that produced no document; the `failed` outcome
    (`stopped` when the workspace refuses the record: the rerun does the PDF again)."""
    uri = record.source
    if ctx.halt.error is not None:
        return PdfOutcome(uri=uri, status="stopped")
    try:
        await ctx.claims.ready(record.group_id)
        location: str | None = await asyncio.to_thread(
            ctx.workspace.record_failure, record, guard=_guard(ctx, record.group_id))
    except WriteRefusedError as exc:
        ctx.halt.trip(exc)
        return PdfOutcome(uri=uri, status="stopped")
    except ClaimLostError:
        return PdfOutcome(uri=uri, status="handed_over")
    except Exception:
        log.exception("could not write the ledger record for %s", uri)
        location = None
    ctx.stats.pdfs_failed += 1
    log.warning("failed %s: %s (%s)", uri, record.reason, record.detail)
    return PdfOutcome(
        uri=uri, status="failed", reason=record.reason, detail=record.detail, location=location
    )
