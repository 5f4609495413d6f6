"""Build a run's admission from plain settings: the gate's config, its metrics URL, the gate.

A saved AdmissionGate block (tasks/admission_block.py) holds settings only; the task layer
loads it and hands over what it says as a `GateSettings`. Here those settings meet the
run's (RunConfig): the overrides, the outage deadline, which /metrics each gate polls,
and the live Gate (or fixed cap) per server, behind a Router when there are several.
Everything is opened inside the caller's event loop, the one the group tasks run in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from pagegate.admission import Admission, FixedLimit, Gate, GateConfig, MetricsPoller
from pagegate.admission.router import Router
from pagegate.clock import Clock
from pagegate.config import RunConfig
from pagegate.server.managed import ManagedServerConfig, managed_server_config
from pagegate.server.metrics import metrics_url_for

log = logging.getLogger("pagegate.gate")

METRICS_URL = "metrics_url"  # a gate_overrides key that is not a GateConfig field


@dataclass(frozen=True)
class GateSettings:
    """What a saved AdmissionGate says, as plain data (the defaults: no block named)."""

    config: GateConfig = field(default_factory=GateConfig)
    metrics_url: str | None = None  # empty: derived from each server's base URL


def apply_overrides(config: GateConfig, overrides: Mapping[str, Any]) -> GateConfig:
    """GateConfig with some fields replaced; unknown names (and the controller's constants,
    `tuning`, which no user sets) are an error, not ignored."""
    known = {f.name for f in dataclasses.fields(GateConfig)} - {"tuning"}
    unknown = sorted(set(overrides) - known - {METRICS_URL})
    if unknown:
        raise ValueError(f"unknown gate settings: {', '.join(unknown)}")
    values = {k: v for k, v in overrides.items() if k != METRICS_URL}
    return dataclasses.replace(config, **values)


def run_gate_config(gate: GateConfig, run: RunConfig) -> GateConfig:
    """The gate's settings with the run's overrides, under the run's outage deadline and
    within a quarter of its request timeout.

    A page waiting at a paused gate sees no capacity error, so the run's
    `server_unavailable_after_seconds` could not end its wait: the gate's own deadline
    is therefore never longer than the run's (the shorter of the two applies), unless
    gate_overrides sets it explicitly.
    """
    config = apply_overrides(gate, run.gate_overrides)
    if "page_latency_limit_seconds" not in run.gate_overrides and config.page_latency_limit_seconds:
        # Pages of a mean latency above a quarter of the client's timeout have a tail that
        # times out (docs/admission.md), so a shorter request timeout lowers the limit.
        limit = min(config.page_latency_limit_seconds, run.request_timeout_seconds / 4)
        config = dataclasses.replace(config, page_latency_limit_seconds=limit)
    if "unavailable_after_seconds" in run.gate_overrides:
        return config
    run_deadline = run.server_unavailable_after_seconds
    own = config.unavailable_after_seconds
    deadline = run_deadline if own is None else min(own, run_deadline)
    return dataclasses.replace(config, unavailable_after_seconds=deadline)


def gate_metrics_url(settings: GateSettings, run: RunConfig, server_url: str) -> str:
    """The /metrics URL the gate of `server_url` polls.

    One server: gate_overrides' metrics_url, else the block's, else derived from the
    server's base URL. Several: always derived, since a configured URL names one server.
    """
    if len(run.servers) > 1:
        return metrics_url_for(server_url)
    override = str(run.gate_overrides.get(METRICS_URL) or "")
    return override or settings.metrics_url or metrics_url_for(server_url)


def launch_config(
    launch_server: Mapping[str, Any] | None, supervision: Mapping[str, float | int]
) -> ManagedServerConfig | None:
    """The flow's `launch_server` as settings; the block's watchdog settings (its
    `supervision()`) fill what launch_server leaves unset. None: no server to launch."""
    if not launch_server:
        return None
    return managed_server_config({**supervision, **launch_server})


@asynccontextmanager
async def open_admission(
    run: RunConfig, settings: GateSettings, *, http: httpx.AsyncClient, clock: Clock
) -> AsyncIterator[Admission]:
    """The run's admission; closed (waiters released, poller stopped) on exit.

    One server: its gate (or a fixed cap). Several (`run.server_urls`): one gate or
    fixed cap per server behind a Router that sends each page to the least-loaded
    server in rotation (pagegate/admission/router.py).
    """
    servers = run.servers
    if len(servers) == 1:
        async with _open_one(run, settings, servers[0], http=http, clock=clock) as admission:
            yield admission
        return
    if METRICS_URL in run.gate_overrides:
        raise ValueError("gate_overrides.metrics_url names one server; drop it with several")
    async with contextlib.AsyncExitStack() as stack:
        backends = [
            (url, await stack.enter_async_context(
                _open_one(run, settings, url, http=http, clock=clock)))
            for url in servers
        ]
        router = await stack.enter_async_context(
            Router(backends, clock=clock,
                   unavailable_after_seconds=run.server_unavailable_after_seconds)
        )
        log.info("routing pages over %d servers: %s", len(servers), ", ".join(servers))
        yield router


@asynccontextmanager
async def _open_one(
    run: RunConfig, settings: GateSettings, server_url: str, *,
    http: httpx.AsyncClient, clock: Clock,
) -> AsyncIterator[Admission]:
    """One server's admission: its gate, or a fixed cap of max_concurrent_requests."""
    if not run.use_gate:
        yield FixedLimit(run.max_concurrent_requests)
        return
    gate_config = run_gate_config(settings.config, run)
    metrics_url = gate_metrics_url(settings, run, server_url)
    headers = {"Authorization": f"Bearer {run.api_key}"} if run.api_key else None
    poller = MetricsPoller(
        metrics_url, timeout_seconds=gate_config.scrape_timeout_seconds, clock=clock,
        headers=headers,
    )
    log.info("admission gate on %s: %s", metrics_url, gate_config)
    try:
        async with Gate(gate_config, poller, clock) as gate:
            yield gate
    finally:
        await poller.aclose()
