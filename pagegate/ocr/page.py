"""OCR one page: admit, render, ask the model, parse, retry, fall back.

This is the imperative shell around the pure pieces: `AttemptPlan` decides what to
try next, `vlm` builds requests and parses replies, `Admission` decides when a
request may go. Memory stays flat because a page is rendered only once its permit is
granted, and the image is dropped as soon as the request body is built.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass

from pagegate.admission.base import Admission, Outcome, Permit
from pagegate.admission.router import RoutedPermit
from pagegate.clock import Clock
from pagegate.errors import CapacityError, ContentError, InputError, ServerUnavailableError
from pagegate.ocr.attempts import Attempt, AttemptPlan
from pagegate.ocr.backoff import BackoffPolicy
from pagegate.ocr.client import PageClient
from pagegate.ocr.halt import Halt
from pagegate.ocr.stats import RunStats
from pagegate.output.documents import PageLayout, PageResult
from pagegate.pdf.renderer import PdfSource, Renderer
from pagegate.vlm.chat import Usage, build_chat_request, parse_chat_response, usage_of
from pagegate.vlm.layout import block_in_points
from pagegate.vlm.profiles import ModelProfile
from pagegate.vlm.reply import PageReply

log = logging.getLogger("pagegate.page")


@dataclass(frozen=True)
class PdfDocument:
    """A fetched, validated PDF whose pages are ready to be OCRed; `source` is what the
    renderer opens (its bytes or file, and the password it needs)."""

    uri: str
    source: PdfSource
    page_count: int


@dataclass(frozen=True)
class _Frame:
    """The sent image's size in pixels and the page's in points, for the reply's boxes."""

    pixels: tuple[int, int]
    points: tuple[float, float]


@dataclass(frozen=True)
class _AttemptResult:
    reply: PageReply | None
    usage: Usage
    error: str | None
    frame: _Frame | None = None


def _layout(reply: PageReply, frame: _Frame | None) -> PageLayout | None:
    """The reply's blocks in PDF points; None when the model gives no layout."""
    if frame is None or not reply.blocks:
        return None
    width_pt, height_pt = frame.points
    return PageLayout(width_pt, height_pt,
                      tuple(block_in_points(b, width_pt, height_pt) for b in reply.blocks))


class _RenderFailed(Exception):
    """The page itself cannot be rendered; no model attempt can help."""


class PageOcr:
    """Everything needed to OCR pages of one run; one instance per run."""

    def __init__(
        self,
        *,
        client: PageClient,
        admission: Admission,
        renderer: Renderer,
        profile: ModelProfile,
        model: str,
        clock: Clock,
        stats: RunStats,
        max_attempts: int,
        unavailable_after_seconds: float,
        routes: Mapping[str, PageClient] | None = None,
        backoff: BackoffPolicy | None = None,
        rng: random.Random | None = None,
        halt: Halt | None = None,
    ) -> None:
        """`client` serves every page unless the permit names a server in `routes`
        (several servers behind a Router: pagegate/admission/router.py). Once `halt`
        trips, no page is rendered or sent (pagegate.ocr.halt)."""
        self.halt = halt or Halt()
        self.client = client
        self.routes = dict(routes or {})
        self.backoff = backoff or BackoffPolicy()
        self._rng = rng or random.Random()
        self.admission = admission
        self.renderer = renderer
        self.profile = profile
        self.model = model
        self.clock = clock
        self.stats = stats
        self.max_attempts = max_attempts
        self.unavailable_after_seconds = unavailable_after_seconds

    async def run(self, doc: PdfDocument, page_index: int, group_id: str) -> PageResult:
        """OCR page `page_index` (0-based) of `doc`. Raises only ServerUnavailableError,
        and WriteRefusedError once the run's halt has tripped."""
        plan = AttemptPlan.start(self.profile, self.max_attempts)
        input_tokens = output_tokens = attempts = 0
        last_error: str | None = None
        frame: _Frame | None = None
        while not plan.done:
            attempt = plan.current
            attempts += 1
            self.stats.page_attempts += 1
            try:
                result = await self._attempt(doc, page_index, attempt, group_id)
            except _RenderFailed as exc:
                last_error = str(exc)
                break
            input_tokens += result.usage.prompt_tokens
            output_tokens += result.usage.completion_tokens
            if result.reply is not None:
                plan = plan.on_reply(result.reply)
                frame = result.frame
            else:
                last_error = result.error
                plan = plan.on_content_error(result.error or "unusable reply")
        self.stats.input_tokens += input_tokens
        self.stats.output_tokens += output_tokens
        self.stats.pages_done += 1
        reply = plan.accepted
        if reply is not None:
            return PageResult(
                page_number=page_index + 1,
                text=reply.text,
                reply=reply,
                is_fallback=False,
                layout=_layout(reply, frame),
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                attempts=attempts,
            )
        self.stats.fallback_pages += 1
        errors = plan.errors
        return PageResult(
            page_number=page_index + 1,
            text=await self._fallback_text(doc, page_index),
            reply=None,
            is_fallback=True,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            attempts=attempts,
            error=last_error or (errors[-1] if errors else None),
        )

    async def _attempt(
        self, doc: PdfDocument, page_index: int, attempt: Attempt, group_id: str
    ) -> _AttemptResult:
        """One attempt, repeated through capacity errors until it gets an answer.

        Capacity errors back off (capped, jittered) and repeat the same attempt (same
        temperature, same rotation), however many there are; after
        `unavailable_after_seconds` of nothing else they become ServerUnavailableError,
        which fails the PDF as `server_unavailable`. The admission raising
        ServerUnavailableError itself (a gate paused past its own deadline, a router
        with no server in rotation) has already waited, so it is final at once.
        """
        first_failure_at: float | None = None
        failures = 0
        while True:
            try:
                return await self._send(doc, page_index, attempt, group_id)
            except ServerUnavailableError:
                raise
            except CapacityError as exc:
                now = self.clock.now()
                first_failure_at = now if first_failure_at is None else first_failure_at
                if now - first_failure_at >= self.unavailable_after_seconds:
                    raise ServerUnavailableError(
                        f"server unavailable for {now - first_failure_at:.0f}s: {exc}"
                    ) from exc
                failures += 1
                self.stats.capacity_retries += 1
                delay = self.backoff.delay(failures, self._rng.random())
                log.debug("capacity error on %s p%d (%s); retrying in %.1fs",
                          doc.uri, page_index + 1, exc, delay)
                await self.clock.sleep(delay)

    async def _send(
        self, doc: PdfDocument, page_index: int, attempt: Attempt, group_id: str
    ) -> _AttemptResult:
        async with AsyncExitStack() as stack:
            async with self.halt.waiting():  # a trip ends the wait (pagegate.ocr.halt)
                permit = await stack.enter_async_context(self.admission.slot(group_id))
            self._unless_halted(permit)  # admitted as the halt tripped
            try:
                image = await self.renderer.render(
                    doc.source, page_index, rotation=attempt.rotation
                )
            except InputError as exc:
                permit.finish(Outcome.CANCELLED)
                raise _RenderFailed(
                    f"page {page_index + 1} cannot be rendered ({exc.reason}): {exc}"
                ) from exc
            body = build_chat_request(
                self.profile, model=self.model, image_png=image.png,
                temperature=attempt.temperature, attempt=attempt.number,
            )
            frame = _Frame((image.width, image.height), (image.width_pt, image.height_pt))
            del image
            self._unless_halted(permit)  # tripped while this page rendered
            permit.sent()
            # Only the call holds the request, so its bytes go once sent (ocr/client.py).
            sending = self._client_for(permit).complete(body)
            del body
            try:
                reply_body = await sending
            except ContentError as exc:
                permit.finish(Outcome.CONTENT)
                return _AttemptResult(None, Usage(0, 0), str(exc))
            try:
                reply, usage = parse_chat_response(self.profile, reply_body, frame.pixels)
            except ContentError as exc:
                permit.finish(Outcome.CONTENT)
                return _AttemptResult(None, usage_of(reply_body), str(exc))
            permit.finish(Outcome.OK)
            return _AttemptResult(reply, usage, None, frame)

    def _unless_halted(self, permit: Permit) -> None:
        """Hand the permit back unused and raise, once the run's halt has tripped."""
        if self.halt.error is not None:
            permit.finish(Outcome.CANCELLED)
            self.halt.check()

    def _client_for(self, permit: Permit) -> PageClient:
        """The server the permit routes to, or the run's one server."""
        if isinstance(permit, RoutedPermit):
            return self.routes.get(permit.server_url, self.client)
        return self.client

    async def _fallback_text(self, doc: PdfDocument, page_index: int) -> str:
        try:
            return await self.renderer.text(doc.source, page_index)
        except InputError as exc:
            log.warning("no fallback text for %s p%d: %s", doc.uri, page_index + 1, exc)
            return ""
