"""POST one chat completion to an OpenAI-compatible server and sort failures into kinds.

The sort is what lets retries tell overload from bad answers:
- CapacityError: the server could not take the request now (connection refused or
  reset, timeouts, 429, 502/503/504). The caller backs off and repeats the *same*
  attempt; it never uses up one of the page's attempts.
- ContentError: the server answered but the answer cannot be used (other 4xx/5xx, a
  body that is not JSON). The caller moves on to the next attempt.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from pagegate.errors import CapacityError, ContentError

# Statuses that mean "not now" rather than "not this request". 503 is what vLLM sends when
# its engine is dead or (since --max-num-queued-reqs, vLLM PR #49445) its queue is full;
# 429 is the usual rate-limit answer of hosted OpenAI-compatible providers. A 500 is
# treated as content: an engine bug on one request must not loop until the deadline.
CAPACITY_STATUSES = frozenset({408, 425, 429, 502, 503, 504})


def classify_status(status: int) -> str:
    """'ok', 'capacity' or 'content' for an HTTP status code."""
    if 200 <= status < 300:
        return "ok"
    if status in CAPACITY_STATUSES:
        return "capacity"
    return "content"


class _SentOnce:
    """A request body that lets go of its bytes once httpx has taken them.

    httpx keeps a request's content until the response is complete, and a page request
    waits in the server's queue for seconds to minutes: a page's JSON (the PNG in base64,
    about 0.35 MB) times the pages in flight (hundreds under the gate on a large GPU)
    would sit in the run's memory. Streamed from here, each body is held only while it
    is being written. A retry builds a new request, so nothing needs the bytes again.
    """

    def __init__(self, data: bytes) -> None:
        self._data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        data, self._data = self._data, b""
        yield data


class PageClient:
    """One server's chat-completions endpoint, over a shared httpx.AsyncClient."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        server_url: str,
        *,
        api_key: str | None = None,
        timeout_seconds: float = 600.0,
    ) -> None:
        self.http = http
        self.url = server_url.rstrip("/") + "/chat/completions"
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # Connect quickly (a dead server should be noticed fast); allow a long read,
        # because a request may wait in the server's queue before it is answered.
        self.timeout = httpx.Timeout(timeout_seconds, connect=10.0)

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body`; the reply's JSON. Pass the request without keeping a reference,
        so its bytes are freed once sent (`_SentOnce`)."""
        data = json.dumps(body, separators=(",", ":")).encode()
        del body
        headers = {**self.headers, "Content-Type": "application/json",
                   "Content-Length": str(len(data))}
        content = _SentOnce(data)
        del data
        try:
            response = await self.http.post(
                self.url, content=content, headers=headers, timeout=self.timeout
            )
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            cause = str(exc) or type(exc).__name__
            raise CapacityError(f"{self.url}: {type(exc).__name__}: {cause}") from exc
        kind = classify_status(response.status_code)
        if kind == "capacity":
            raise CapacityError(
                f"{self.url}: HTTP {response.status_code}: {response.text[:200]}",
                status=response.status_code,
            )
        if kind == "content":
            raise ContentError(f"HTTP {response.status_code}: {response.text[:500]}")
        try:
            data = response.json()
        except ValueError as exc:
            raise ContentError(f"reply is not JSON: {response.text[:200]!r}") from exc
        if not isinstance(data, dict):
            raise ContentError("reply JSON is not an object")
        return data
