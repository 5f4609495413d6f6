"""The live objects of one run, built inside the event loop that uses them: its server
(when it launches one) and its context.

An asyncio primitive belongs to the loop it was created in, so the flow builds one
`RunContext` in its own loop and every group task it awaits shares it: one HTTP
client, one pdfium thread, one admission gate, one set of counters.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from pagegate.admission.base import Admission
from pagegate.clock import Clock, MonotonicClock
from pagegate.config import RunConfig
from pagegate.io.s3 import make_s3_client
from pagegate.ocr.backoff import BackoffPolicy
from pagegate.ocr.client import PageClient
from pagegate.ocr.page import PageOcr
from pagegate.ocr.stats import RunStats
from pagegate.output.workspace import Workspace
from pagegate.pdf.renderer import PageRenderer
from pagegate.server.managed import open_managed_servers
from pagegate.vlm.profiles import ModelProfile, get_profile


@dataclass
class RunContext:
    config: RunConfig
    profile: ModelProfile
    workspace: Workspace
    pages: PageOcr
    renderer: PageRenderer
    admission: Admission
    clock: Clock
    stats: RunStats
    s3_client: Any
    downloads: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(8))


@asynccontextmanager
async def open_run_context(
    config: RunConfig,
    admission: Admission,
    *,
    http: httpx.AsyncClient,
    clock: Clock | None = None,
) -> AsyncIterator[RunContext]:
    """Build the run's live objects around an admission already running in this loop."""
    clock = clock or MonotonicClock()
    profile = get_profile(config.profile)
    s3_client = make_s3_client(retry_mode=config.s3_retry_mode)
    workspace = Workspace.open(config.workspace, s3_client=s3_client)
    stats = RunStats(started_at=clock.now())
    with PageRenderer(target_longest_dim=config.target_longest_image_dim) as renderer:
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
            downloads=asyncio.Semaphore(config.download_concurrency),
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
