"""The live objects of one run, built inside the event loop that uses them: its server
(when it launches one) and its context.

An asyncio primitive belongs to the loop it was created in, so the flow builds one
`RunContext` in its own loop and every group task it awaits shares it: one HTTP
client, one render pool (worker processes), one intake, one admission gate, one set of
counters, one spool folder for downloaded PDFs too large to hold in memory.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from pagegate.admission.base import Admission
from pagegate.claims.board import Board
from pagegate.claims.holder import Holder, open_holder
from pagegate.claims.lease import Lease
from pagegate.clock import Clock, MonotonicClock
from pagegate.config import RunConfig
from pagegate.io.s3 import LazyS3Client
from pagegate.ocr.backoff import BackoffPolicy
from pagegate.ocr.client import PageClient
from pagegate.ocr.halt import Halt
from pagegate.ocr.intake import Intake
from pagegate.ocr.page import PageOcr
from pagegate.ocr.stats import RunStats
from pagegate.output.workspace import Workspace
from pagegate.pdf.pool import PoolSettings, RenderPool
from pagegate.server.managed import open_managed_servers
from pagegate.vlm.profiles import ModelProfile, get_profile


@dataclass
class RunContext:
    config: RunConfig
    profile: ModelProfile
    workspace: Workspace
    pages: PageOcr
    renderer: RenderPool
    admission: Admission
    clock: Clock
    stats: RunStats
    s3_client: Any
    intake: Intake
    spool_dir: Path
    halt: Halt
    claims: Holder


def pool_settings(config: RunConfig) -> PoolSettings:
    """The render pool a run's config asks for, its page size from the profile's image rule.

    A profile sized by its longest side (olmOCR-2) takes the run's
    `target_longest_image_dim`; one sized by DPI or shortest side keeps its model's rule.
    """
    rule = get_profile(config.profile).image
    by_longest = rule.longest_side is not None
    return PoolSettings(
        workers=config.render_workers,
        timeout_seconds=config.render_timeout_seconds,
        memory_limit_mb=config.render_memory_limit_mb,
        target_longest_dim=config.target_longest_image_dim if by_longest else rule.max_side,
        max_pixels=rule.max_pixels,
        dpi=rule.dpi,
        target_shortest_dim=rule.shortest_side,
    )


def pages_ahead(admission: Admission, clock: Clock, config: RunConfig) -> int:
    """How many unfinished pages the intake keeps: three times what the admission lets in
    flight now (the configured request cap while it names no limit), at least 256.

    The pages in flight, plus enough waiting for the gate's next unit (which can exceed
    its current limit: a unit also covers service until the release after it).
    """
    limit = admission.signals(clock.now()).limit
    return max(256, 3 * (limit if limit is not None else config.max_concurrent_requests))


def run_label(config: RunConfig) -> str:
    """This run's name in the workspace's claims: its Prefect flow run's id (a Retry of
    the run is the same run, and takes back what it held), else a fresh one."""
    return config.run_id or f"run-{uuid.uuid4()}"


@asynccontextmanager
async def open_run_context(
    config: RunConfig,
    admission: Admission,
    *,
    http: httpx.AsyncClient,
    clock: Clock | None = None,
    renderer: RenderPool | None = None,
) -> AsyncIterator[RunContext]:
    """Build the run's live objects around an admission already running in this loop.

    The render pool is started here and closed on exit, unless the caller passes its own.
    """
    clock = clock or MonotonicClock()
    run_clock = clock
    profile = get_profile(config.profile)
    s3_client = LazyS3Client(retry_mode=config.s3_retry_mode, credentials=config.s3_credentials)
    workspace = Workspace.open(config.workspace, s3_client=s3_client)
    stats = RunStats(started_at=clock.now())
    halt = Halt()
    async with AsyncExitStack() as stack:
        board = Board(workspace.store, run_label(config), name=config.run_name)
        claims = await stack.enter_async_context(
            open_holder(board, Lease(config.claim_lease_seconds), clock, on_refused=halt.trip)
        )
        if renderer is None:
            renderer = await stack.enter_async_context(RenderPool(pool_settings(config)))
        spool_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pagegate-spool-")))
        intake = Intake(
            budget_bytes=config.pdf_memory_budget_mb * 2**20,
            max_fetching=config.download_concurrency,
            pages_ahead=lambda: pages_ahead(admission, run_clock, config),
        )
        clients = {
            url: PageClient(
                http, url, api_key=config.api_key, timeout_seconds=config.request_timeout_seconds
            )
            for url in config.servers
        }
        pages = PageOcr(
            client=clients[config.servers[0]],
            routes=clients,  # several servers: the router's permit names the one to use
            backoff=BackoffPolicy(
                base=min(1.0, config.capacity_backoff_max_seconds),
                cap=config.capacity_backoff_max_seconds,
            ),
            admission=admission,
            renderer=renderer,
            profile=profile,
            model=config.model,
            clock=clock,
            stats=stats,
            max_attempts=config.max_page_retries,
            unavailable_after_seconds=config.server_unavailable_after_seconds,
            halt=halt,
        )
        yield RunContext(
            config=config,
            profile=profile,
            workspace=workspace,
            pages=pages,
            renderer=renderer,
            admission=admission,
            clock=clock,
            stats=stats,
            s3_client=s3_client,
            intake=intake,
            spool_dir=spool_dir,
            halt=halt,
            claims=claims,
        )


@asynccontextmanager
async def open_run_server(
    config: RunConfig, *, http: httpx.AsyncClient, clock: Clock
) -> AsyncIterator[RunConfig]:
    """The run's config, pointed at launched servers when it asks for them.

    Without `managed_server` the config comes back as it is (external servers). With
    it, the server (or one per GPU) is started, ready and warmed up, and supervised until
    exit; the config's server_url (and server_urls, for several) and model name follow.
    """
    managed = config.managed_server
    if managed is None:
        yield config
        return
    if config.server_urls:
        raise ValueError("server_urls and a launched server exclude each other")
    async with open_managed_servers(
        managed.server_settings(), http=http, clock=clock, watchdog=managed.watchdog,
        profile=config.profile, ready_timeout_seconds=managed.ready_timeout_seconds,
        stop_timeout_seconds=managed.stop_timeout_seconds,
    ) as servers:
        urls = tuple(server.base_url for server in servers)
        yield replace(config, server_url=urls[0], server_urls=urls if len(urls) > 1 else (),
                      model=managed.vllm.served_model_name)
