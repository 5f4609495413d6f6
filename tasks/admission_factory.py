"""Build the run's admission (the gate, or a fixed cap) inside the flow's event loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from pagegate.admission.base import Admission, FixedLimit
from pagegate.clock import Clock
from pagegate.config import RunConfig


@asynccontextmanager
async def open_admission(
    config: RunConfig, *, http: httpx.AsyncClient, clock: Clock
) -> AsyncIterator[Admission]:
    """The gate is wired in with its own issue; until then a fixed cap."""
    yield FixedLimit(config.max_concurrent_requests)
