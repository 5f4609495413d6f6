"""The live objects of one run, built inside the event loop that uses them.

An asyncio primitive belongs to the loop it was created in, so the flow builds one
`RunContext` in its own loop and every group task it awaits shares it: one HTTP
client, one pdfium thread, one admission gate, one set of counters.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from pagegate.admission.base import Admission
from pagegate.backoff import BackoffPolicy
from pagegate.clock import Clock, MonotonicClock
from pagegate.config import RunConfig
from pagegate.page_client import PageClient
from pagegate.page_ocr import PageOcr
from pagegate.profiles import ModelProfile, get_profile
from pagegate.renderer import PageRenderer
from pagegate.run_stats import RunStats
from pagegate.storage import make_s3_client
from pagegate.workspace import Workspace


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
