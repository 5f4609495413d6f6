"""The HTTP hop of the virtual world: httpx's ASGITransport plus what a socket adds.

A request goes to the simulator's app in the same process and event loop, so it takes
no virtual time of its own; the read timeout, a closed port and a proxy's delays or
failures (faults.py) are added here, on the loop's clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx
from starlette.types import ASGIApp

Send = Callable[[httpx.Request], Awaitable[httpx.Response]]
Interposer = Callable[[httpx.Request, Send], Awaitable[httpx.Response]]
"""Stands between the client and the server, as a proxy would: gets each request and the
way on (`send`), and may delay it, answer it itself or raise (faults.py)."""


class SimTransport(httpx.AsyncBaseTransport):
    """httpx's `ASGITransport` over the simulator's app, plus what a socket would add.

    - The request's read timeout (`PageClient`'s 600 s, the poller's 4 s) is enforced on
      the loop's clock; ASGITransport has no network and so no timeouts of its own.
    - `app` None is a server process that is down: connections are refused.
    - `interposers`, first outermost, see every request on its way (a fault adds one for
      a while and removes it); the timeout covers what they add.
    """

    def __init__(self, app: ASGIApp | None) -> None:
        self.app = app
        self.interposers: list[Interposer] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        read = timeouts.get("read")
        send: Send = self._send
        for interposer in reversed(self.interposers):
            send = _through(interposer, send)
        try:
            async with asyncio.timeout(read):
                return await send(request)
        except TimeoutError as exc:
            raise httpx.ReadTimeout(f"no answer in {read} s", request=request) from exc

    async def _send(self, request: httpx.Request) -> httpx.Response:
        app = self.app
        if app is None:
            raise httpx.ConnectError("connection refused (simulated server is down)", request=request)
        response = await httpx.ASGITransport(app=app).handle_async_request(request)
        await response.aread()
        return response


def _through(interposer: Interposer, send: Send) -> Send:
    async def call(request: httpx.Request) -> httpx.Response:
        return await interposer(request, send)
    return call
