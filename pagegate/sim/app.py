"""The simulator's HTTP face: an OpenAI/vLLM-compatible server over the pure `NodeModel`.

Routes (vLLM's OpenAI server, vllm/entrypoints/openai/api_server.py):
- POST /v1/chat/completions: the body a profile sends (text part + data:image/png;base64
  image). The reply is in that profile's format (pagegate.sim.replies, the profile known
  by its prompt). Given `--pdfs`, a request showing one of their pages is answered with
  the page's text layer, boxes where its lines are (pagegate.sim.pages); any other page
  gets the line `page <sha1(png)[:16]>`, which olmOCR's format pads with filler of ~4
  characters per completion token.
- GET /v1/models, GET /health, GET /metrics (vLLM's metric names, exporter.py).
- GET /metrics/?name[]=...: only the named samples, as vLLM's mounted prometheus-client
  exposition serves them (an exact /metrics is vLLM's instrumentator, which ignores the
  query); it costs the front end a fraction of a whole page (frontend.NAMED_SCRAPE_SHARE).
/metrics and /health are answered by the simulated API server's event loop (frontend.py),
so they wait behind its backlog as vLLM's do; /v1/models answers at once.

Death, like vLLM (vllm/entrypoints/launcher.py): when the engine core dies, requests in
flight get 500, /health answers 503, and unless VLLM_KEEP_ALIVE_ON_ENGINE_DEATH is set the
API server exits (`server.should_exit = True`). `serve_sim` does the same: it fails the
requests in flight with 500, shuts uvicorn down (the port then refuses connections) and
raises `SimulatorCrashed`; `pagegate sim` exits with status 3. An app from `build_app`
served in-process has no process to end, so it behaves like vLLM with keep-alive on:
500 for completions, 503 for /health, forever.

A client that disconnects has its request aborted in the model (vLLM aborts on disconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from pagegate.clock import Clock, MonotonicClock, ScaledClock
from pagegate.sim.chat import BadRequest, completion_body, error_response, parse_chat_body
from pagegate.sim.config import CUT_TOKENS, SimConfig
from pagegate.sim.driver import SimEngine
from pagegate.sim.exporter import NamedSamples, VllmMetricsCollector
from pagegate.sim.pages import PageIndex
from pagegate.sim.records import EngineDeadError, Finished, QueueFullError, RequestTooLongError
from pagegate.sim.workload import output_tokens, prompt_tokens


class SimulatorCrashed(RuntimeError):
    """The simulated server died of overload; `serve_sim` ends with this."""


def _dead() -> Response:
    return error_response(500, "EngineCore encountered an issue.", "EngineDeadError")


def default_clock(config: SimConfig) -> Clock:
    return MonotonicClock() if config.time_scale == 1.0 else ScaledClock(config.time_scale)


def build_app(config: SimConfig, clock: Clock | None = None, *, engine: SimEngine | None = None) -> Starlette:
    """The simulator as an ASGI app; `app.state.engine` is its `SimEngine` (`engine`, or
    one built from `config` and `clock`).

    Works under uvicorn and under httpx.ASGITransport (which runs no lifespan: the engine
    task starts with the first chat request).
    """
    engine = engine or SimEngine(config, clock or default_clock(config))
    corpus = PageIndex.from_paths(config.pdfs) if config.pdfs else None
    name = config.served_model_name
    registry = CollectorRegistry(auto_describe=False)
    registry.register(VllmMetricsCollector(engine.snapshot, name,
                                           cache_config=engine.profile.exports_cache_config))

    async def chat_completions(request: Request) -> Response:
        if engine.crashed:
            return _dead()
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            return error_response(400, "body is not valid JSON", "BadRequestError")
        try:
            page = parse_chat_body(body)
        except BadRequest as exc:
            return error_response(400, str(exc), "BadRequestError")
        engine.requests_seen += 1
        number = engine.requests_seen
        every = config.reject_status_every
        if every and number % every == 0:
            return error_response(503, "simulated capacity rejection", "ServiceUnavailableError")
        prompt = prompt_tokens(page.width, page.height, page.text_chars)
        max_tokens = page.max_tokens or max(1, engine.profile.max_model_len - prompt)
        req_id = f"chatcmpl-{number:08d}"
        output = output_tokens(config.seed, page.digest, engine.profile.output_scale,
                               engine.samples[page.digest])
        # Decoding and matching the image is CPU work: off the loop that serves /metrics.
        found = await asyncio.to_thread(corpus.find, page.png) if corpus else None
        if found is not None and config.cut_pages_match(found.text):
            max_tokens = min(max_tokens, CUT_TOKENS)
            output = max_tokens + 1
        try:
            future = engine.submit(req_id, prompt, output, max_tokens, body_bytes=len(raw), pixels=page.width * page.height)
            finished = await _until_done_or_disconnected(request, future)
        except RequestTooLongError as exc:
            return error_response(400, str(exc), "BadRequestError")
        except QueueFullError as exc:
            return error_response(503, str(exc), "ServiceUnavailableError")
        except EngineDeadError:
            return _dead()
        except asyncio.CancelledError:
            engine.abort(req_id)
            raise
        if finished is None:
            engine.abort(req_id)
            return Response(status_code=499)
        if finished.finish_reason == "length":
            # A reply cut off at max_tokens is a sample that ran on (a repetition loop);
            # the page's next request is a fresh sample, which usually ends (why olmOCR
            # retries). Any other request for a page writes that page's own length.
            engine.samples[page.digest] += 1
        return JSONResponse(completion_body(req_id, name, page, finished, config, found))

    async def models(_: Request) -> Response:
        card = {
            "id": name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "vllm",
            "root": name,
            "parent": None,
            "max_model_len": engine.profile.max_model_len,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def health(_: Request) -> Response:
        await engine.probe(scrape=False)
        return Response(status_code=503 if engine.crashed else 200)

    async def metrics(_: Request) -> Response:
        await engine.probe()
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def named_metrics(request: Request) -> Response:
        names = frozenset(request.query_params.getlist("name[]"))
        await engine.probe(named=bool(names))
        page = NamedSamples(registry, names) if names else registry
        return Response(generate_latest(page), media_type=CONTENT_TYPE_LATEST)

    async def root(_: Request) -> Response:
        return PlainTextResponse(f"pagegate simulator ({engine.profile.name})\n")

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        engine.start()
        try:
            yield
        finally:
            await engine.stop()

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/metrics/", named_metrics, methods=["GET"]),
            Route("/", root, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.engine = engine
    return app


async def _until_done_or_disconnected(request: Request, future: asyncio.Future[Finished]) -> Finished | None:
    """The finished request, or None if the client hung up first."""
    disconnected: asyncio.Future[Any] = asyncio.ensure_future(_wait_disconnect(request))
    watched: set[asyncio.Future[Any]] = {future, disconnected}
    try:
        await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
    finally:
        disconnected.cancel()
    if future.done():
        return future.result()
    return None


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def serve_sim(
    config: SimConfig,
    *,
    host: str,
    port: int,
    clock: Clock | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the simulator until cancelled, signalled, or crashed (then raise SimulatorCrashed).

    `port` 0 picks a free port; `on_ready` gets the root URL ("http://HOST:PORT") once the
    socket listens.
    """
    app = build_app(config, clock)
    engine: SimEngine = app.state.engine
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=5,
        )
    )

    def shut_down() -> None:
        server.should_exit = True

    engine.on_crash(shut_down)
    with contextlib.suppress(NotImplementedError, RuntimeError):  # no signals off Unix
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, engine.hang)
    serving = asyncio.create_task(server.serve(), name="sim-uvicorn")
    while not server.started and not serving.done():
        await asyncio.sleep(0.01)  # uvicorn has no "listening" hook; poll its flag
    if server.started and on_ready is not None:
        bound = server.servers[0].sockets[0].getsockname()[1]
        on_ready(f"http://{host}:{bound}")
    await serving
    if engine.crashed:
        raise SimulatorCrashed(engine.node.crash_reason or "engine died")


def ready_line(config: SimConfig, root_url: str) -> str:
    return f"pagegate sim: serving {config.profile} on {root_url}/v1 (time scale {config.time_scale:g})"


