"""Build the run's admission (the gate, or a fixed cap) inside the flow's event loop.

The AdmissionGate Block holds settings only; this is where they become a live `Gate`
with its metrics poller, bound to the loop the group tasks run in.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx

from pagegate.admission import FixedLimit, Gate, GateConfig, MetricsPoller
from pagegate.admission.base import Admission
from pagegate.clock import Clock
from pagegate.config import RunConfig
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


@asynccontextmanager
async def open_admission(
    config: RunConfig, *, http: httpx.AsyncClient, clock: Clock
) -> AsyncIterator[Admission]:
    """The run's admission; closed (waiters released, poller stopped) on exit."""
    if not config.use_gate:
        yield FixedLimit(config.max_concurrent_requests)
        return
    block = await load_gate_block(config.gate_block)
    gate_config = apply_overrides(block.to_config(), config.gate_overrides)
    metrics_url = str(config.gate_overrides.get("metrics_url") or "") or block.resolve_metrics_url(
        config.server_url
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
