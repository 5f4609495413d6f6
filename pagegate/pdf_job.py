"""Process one PDF end to end: skip if done, fetch, validate, OCR its pages, commit.

Every way a PDF can fail ends here as a ledger record and a `failed` outcome; nothing
propagates, so one bad PDF never stops its group or the run.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from pagegate import __version__
from pagegate.documents import PageResult, build_dolma_document
from pagegate.errors import InputError, ServerUnavailableError
from pagegate.ledger import record_from_error
from pagegate.outcomes import PdfOutcome
from pagegate.page_ocr import PdfDocument
from pagegate.run_context import RunContext
from pagegate.storage import read_uri

log = logging.getLogger("pagegate.pdf")


def _utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


async def process_pdf(ctx: RunContext, uri: str, group_id: str) -> PdfOutcome:
    """OCR one PDF and commit it, or record why it could not be done."""
    workspace = ctx.workspace
    try:
        if ctx.config.skip_committed and await asyncio.to_thread(workspace.is_committed, uri):
            return PdfOutcome(uri=uri, status="skipped")
        async with ctx.downloads:
            data = await asyncio.to_thread(read_uri, uri, s3_client=ctx.s3_client)
        info = await ctx.renderer.inspect(
            data,
            password=ctx.config.pdf_password,
            max_pages=ctx.config.max_pages_per_pdf,
            source=uri,
        )
        ctx.stats.pages_total += info.page_count
        doc = PdfDocument(uri, data, info.page_count, ctx.config.pdf_password)
        pages = await _ocr_all_pages(ctx, doc, group_id)
        del data, doc
        dolma = build_dolma_document(
            source_uri=uri,
            pages=pages,
            model=ctx.config.model,
            profile=ctx.profile,
            now=datetime.now(UTC),
            pagegate_version=__version__,
        )
        location = await asyncio.to_thread(
            workspace.commit_document, uri, dolma, markdown=ctx.config.markdown
        )
    except (InputError, ServerUnavailableError) as exc:
        return await _fail(ctx, uri, group_id, exc)
    except Exception as exc:  # one bad PDF must never stop the run
        log.exception("unexpected error on %s", uri)
        return await _fail(ctx, uri, group_id, exc)
    ctx.stats.pdfs_done += 1
    fallback = sum(1 for p in pages if p.is_fallback)
    return PdfOutcome(
        uri=uri,
        status="ok",
        pages=len(pages),
        fallback_pages=fallback,
        input_tokens=sum(p.input_tokens for p in pages),
        output_tokens=sum(p.output_tokens for p in pages),
        location=location,
    )


async def _ocr_all_pages(ctx: RunContext, doc: PdfDocument, group_id: str) -> list[PageResult]:
    """All pages concurrently; if the server is gone for good, stop the siblings too."""
    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(ctx.pages.run(doc, i, group_id)) for i in range(doc.page_count)]
    except* ServerUnavailableError as group:
        raise group.exceptions[0] from None
    return [t.result() for t in tasks]


async def _fail(ctx: RunContext, uri: str, group_id: str, exc: BaseException) -> PdfOutcome:
    record = record_from_error(uri, exc, at=_utc_now_iso(), group_id=group_id)
    ctx.stats.pdfs_failed += 1
    log.warning("failed %s: %s (%s)", uri, record.reason, record.detail)
    try:
        location: str | None = await asyncio.to_thread(ctx.workspace.record_failure, record)
    except Exception:
        log.exception("could not write the ledger record for %s", uri)
        location = None
    return PdfOutcome(
        uri=uri, status="failed", reason=record.reason, detail=record.detail, location=location
    )
