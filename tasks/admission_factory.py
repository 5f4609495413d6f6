"""Build the run's admission (the gate, or a fixed cap) inside the flow's event loop.

The AdmissionGate Block holds settings only; this is where they become a live `Gate`
with its metrics poller, bound to the loop the group tasks run in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx

from pagegate.admission import FixedLimit, Gate, GateConfig, MetricsPoller
from pagegate.admission.base import Admission
from pagegate.admission.router import Router
from pagegate.clock import Clock
from pagegate.config import RunConfig
from pagegate.server.managed import ManagedServerConfig, managed_server_config
from pagegate.server.metrics import metrics_url_for
from tasks.admission_block import AdmissionGate

log = logging.getLogger("pagegate.gate")


def apply_overrides(config: GateConfig, overrides: Mapping[str, Any]) -> GateConfig:
    """GateConfig with some fields replaced; unknown names are an error, not ignored."""
    known = {f.name for f in dataclasses.fields(GateConfig)}
    unknown = sorted(set(overrides) - known - {"metrics_url"})
    if unknown:
        raise ValueError(f"unknown gate settings: {', '.join(unknown)}")
    values = {k: v for k, v in overrides.items() if k != "metrics_url"}
    return dataclasses.replace(config, **values)


async def load_gate_block(name: str | None) -> AdmissionGate:
    """The saved block by name, or the defaults when no name is given."""
    if not name:
        return AdmissionGate()
    block = await AdmissionGate.aload(name)
    assert isinstance(block, AdmissionGate)
    return block


def run_gate_config(block: AdmissionGate, config: RunConfig) -> GateConfig:
    """The block's settings with the run's overrides, under the run's outage deadline.

    A page waiting at a paused gate sees no capacity error, so the run's
    `server_unavailable_after_seconds` could not end its wait: the gate's own deadline
    is therefore never longer than the run's (the shorter of the two applies), unless
    gate_overrides sets it explicitly.
    """
    gate_config = apply_overrides(block.to_config(), config.gate_overrides)
    if "unavailable_after_seconds" in config.gate_overrides:
        return gate_config
    run_deadline = config.server_unavailable_after_seconds
    own = gate_config.unavailable_after_seconds
    deadline = run_deadline if own is None else min(own, run_deadline)
    return dataclasses.replace(gate_config, unavailable_after_seconds=deadline)


async def managed_server_for(
    launch_server: Mapping[str, Any] | None, gate_block: str | None
) -> ManagedServerConfig | None:
    """The flow's `launch_server` as settings, with the AdmissionGate block's watchdog
    settings (hang limit, restart budget) where launch_server leaves them unset."""
    if not launch_server:
        return None
    block = await load_gate_block(gate_block)
    return managed_server_config({**block.supervision(), **launch_server})


@asynccontextmanager
async def open_admission(
    config: RunConfig, *, http: httpx.AsyncClient, clock: Clock
) -> AsyncIterator[Admission]:
    """The run's admission; closed (waiters released, poller stopped) on exit.

    One server: its gate (or a fixed cap). Several (`config.server_urls`): one gate or
    fixed cap per server behind a Router that sends each page to the least-loaded
    server in rotation (pagegate/admission/router.py).
    """
    servers = config.servers
    if len(servers) == 1:
        async with _open_one(config, servers[0], http=http, clock=clock) as admission:
            yield admission
        return
    if "metrics_url" in config.gate_overrides:
        raise ValueError("gate_overrides.metrics_url names one server; drop it with several")
    async with contextlib.AsyncExitStack() as stack:
        backends = [
            (url, await stack.enter_async_context(_open_one(config, url, http=http, clock=clock)))
            for url in servers
        ]
        router = await stack.enter_async_context(
            Router(backends, clock=clock,
                   unavailable_after_seconds=config.server_unavailable_after_seconds)
        )
        log.info("routing pages over %d servers: %s", len(servers), ", ".join(servers))
        yield router


@asynccontextmanager
async def _open_one(
    config: RunConfig, server_url: str, *, http: httpx.AsyncClient, clock: Clock
) -> AsyncIterator[Admission]:
    """One server's admission: its gate, or a fixed cap of max_concurrent_requests."""
    if not config.use_gate:
        yield FixedLimit(config.max_concurrent_requests)
        return
    block = await load_gate_block(config.gate_block)
    gate_config = run_gate_config(block, config)
    if len(config.servers) > 1:  # the block's metrics_url names one server: derive each
        metrics_url = metrics_url_for(server_url)
    else:
        metrics_url = str(config.gate_overrides.get("metrics_url") or "") or (
            block.resolve_metrics_url(server_url)
        )
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else None
    poller = MetricsPoller(
        metrics_url,
        timeout_seconds=gate_config.scrape_timeout_seconds,
        clock=clock,
        headers=headers,
    )
    log.info("admission gate on %s: %s", metrics_url, gate_config)
    try:
        async with Gate(gate_config, poller, clock) as gate:
            yield gate
    finally:
        await poller.aclose()
