"""The simulator's HTTP face: an OpenAI/vLLM-compatible server over the pure `ServerModel`.

One engine task per app advances the model to `clock.now()` and sleeps until the step in
progress ends (at least `MIN_WAKE_WALL_S` of wall time, so a fast profile does not wake
thousands of times a second; replies are late by at most that). A submission wakes it
when the engine was idle. With a `ScaledClock(factor)` the whole server runs `factor`
times faster than real time.

Routes (vLLM's OpenAI server, vllm/entrypoints/openai/api_server.py):
- POST /v1/chat/completions: the body olmOCR sends (text part + data:image/png;base64
  image). The reply is olmOCR-shaped (front matter + text) and its text starts with the
  line `page <sha1(png)[:16]>`, then filler of ~4 characters per completion token.
- GET /v1/models, GET /health, GET /metrics (vLLM's metric names, labels model_name and
  engine="0", rendered by prometheus_client from a private registry).

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
import base64
import binascii
import contextlib
import hashlib
import json
import math
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from pagegate.clock import Clock, MonotonicClock, ScaledClock
from pagegate.sim.model import (
    FINISH_REASONS,
    EngineDeadError,
    Finished,
    MetricsSnapshot,
    QueueFullError,
    RequestTooLongError,
    ServerModel,
)
from pagegate.sim.profiles import ServerProfile, get_server_profile
from pagegate.sim.workload import output_tokens, png_size, prompt_tokens
from pagegate.vlm.reply import PageReply, format_reply_text

MIN_WAKE_WALL_S = 0.002
"""Shortest engine-task sleep in wall seconds (scaled by the time scale into sim seconds)."""
CHARS_PER_TOKEN = 4
_FILLER = (
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
    "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat.\n"
)


class SimulatorCrashed(RuntimeError):
    """The simulated server died of overload; `serve_sim` ends with this."""


@dataclass(frozen=True)
class SimConfig:
    """Which server to simulate and how. `None` keeps the profile's value; for the
    three limits (crash_waiting, host_mem_limit_mb, max_num_queued_reqs) 0 turns it off."""

    profile: str = "ci"
    max_num_seqs: int | None = None
    kv_blocks: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    crash_waiting: int | None = None
    host_mem_limit_mb: float | None = None
    max_num_queued_reqs: int | None = None
    seed: int = 0
    time_scale: float = 1.0
    served_model_name: str = "olmocr"
    garbage_below_temperature: float = 0.0
    """Replies lose their front matter when the request temperature is below this."""
    rotate_landscape: bool = False
    """Landscape images get is_rotation_valid false and rotation_correction 90."""
    reject_status_every: int = 0
    """Every k-th chat request gets 503 before reaching the engine (0 = never)."""
    hang_after_requests: int = 0
    """Fault: the engine stops stepping once this many chat requests arrived (0 = never).
    The API, /health and /metrics still answer; requests wait forever and the token
    counters stay flat (vLLM #39863). SIGUSR1 to the process does the same at once."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.time_scale) and self.time_scale > 0):
            raise ValueError("time_scale must be a positive number")
        if self.reject_status_every < 0:
            raise ValueError("reject_status_every must be >= 0")
        if self.hang_after_requests < 0:
            raise ValueError("hang_after_requests must be >= 0")
        if not self.served_model_name:
            raise ValueError("served_model_name must not be empty")
        for name in ("crash_waiting", "host_mem_limit_mb", "max_num_queued_reqs"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0 (0 turns it off)")

    def server_profile(self) -> ServerProfile:
        """The named profile with this config's overrides applied (validated again)."""
        base = get_server_profile(self.profile)
        changes: dict[str, Any] = {
            k: v
            for k, v in {
                "max_num_seqs": self.max_num_seqs,
                "num_gpu_blocks": self.kv_blocks,
                "max_num_batched_tokens": self.max_num_batched_tokens,
                "max_model_len": self.max_model_len,
            }.items()
            if v is not None
        }
        for name in ("crash_waiting", "host_mem_limit_mb", "max_num_queued_reqs"):
            value = getattr(self, name)
            if value is not None:
                changes[name] = value or None
        return replace(base, **changes)


# --- the engine task -------------------------------------------------------------------


class SimEngine:
    """Owns the model and wakes it: one task advances time and resolves waiting requests."""

    def __init__(self, config: SimConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.profile = config.server_profile()
        self.model = ServerModel(self.profile, start=clock.now())
        self.requests_seen = 0
        self._tick = MIN_WAKE_WALL_S * config.time_scale
        self._waiters: dict[str, asyncio.Future[Finished]] = {}
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._crash_listeners: list[Callable[[], None]] = []
        self._crash_announced = False
        self.hung = False
        self._stuck: set[str] = set()  # requests that arrived after the hang

    @property
    def crashed(self) -> bool:
        return self.model.crashed

    def hang(self) -> None:
        """Stop stepping the engine for good (a hung engine; only a restart helps)."""
        self.hung = True

    def on_crash(self, listener: Callable[[], None]) -> None:
        """Call `listener` once, right after the requests in flight have been failed."""
        self._crash_listeners.append(listener)

    def start(self) -> None:
        """Start the engine task in the running loop (idempotent)."""
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def submit(self, req_id: str, prompt: int, output: int, max_tokens: int) -> asyncio.Future[Finished]:
        """Hand a request to the model; the future resolves when it finishes.

        Raises what `ServerModel.submit` raises. If this submission kills the server, the
        returned future (like every other in flight) fails with EngineDeadError.
        """
        self.start()
        future: asyncio.Future[Finished] = asyncio.get_running_loop().create_future()
        limit = self.config.hang_after_requests
        if limit and self.requests_seen >= limit:
            self.hang()
        if self.hung:  # queued in name only: it waits forever
            self._stuck.add(req_id)
            return future
        self.model.submit(req_id, prompt, output, max_tokens, self.clock.now())
        self._waiters[req_id] = future
        self.refresh()
        assert self._wake is not None
        self._wake.set()
        return future

    def abort(self, req_id: str) -> None:
        self._waiters.pop(req_id, None)
        if req_id in self._stuck:
            self._stuck.discard(req_id)
            return
        if self.hung:  # the frozen engine keeps it, as a hung vLLM does
            return
        if not self.model.crashed:
            self.model.abort(req_id, self.clock.now())
        self.refresh()

    def refresh(self) -> MetricsSnapshot:
        """Bring the model up to now, deliver finished requests, and return its metrics."""
        if self.hung:  # time stands still inside; requests that came since wait
            frozen = self.model.snapshot()
            return replace(frozen, waiting=frozen.waiting + len(self._stuck))
        for done in self.model.advance(self.clock.now()):
            future = self._waiters.pop(done.req_id, None)
            if future is not None and not future.done():
                future.set_result(done)
        if self.model.crashed and not self._crash_announced:
            self._crash_announced = True
            reason = self.model.crash_reason or "engine died"
            waiters, self._waiters = self._waiters, {}
            for future in waiters.values():
                if not future.done():
                    future.set_exception(EngineDeadError(reason))
            for listener in self._crash_listeners:
                listener()
        return self.model.snapshot()

    async def _run(self) -> None:
        assert self._wake is not None
        while not self.model.crashed:
            self.refresh()
            next_at = None if self.hung else self.model.next_event_at()
            self._wake.clear()
            if next_at is None:
                await self._wake.wait()
            else:
                await self.clock.sleep(max(next_at - self.clock.now(), self._tick))
        self.refresh()


# --- request and reply shapes (pure) -------------------------------------------------


class BadRequest(ValueError):
    """The request body is not something vLLM would accept (-> 400)."""


@dataclass(frozen=True)
class PageRequest:
    """What the simulator needs from one chat completion body."""

    png: bytes
    width: int
    height: int
    text_chars: int
    temperature: float
    max_tokens: int | None

    @property
    def digest(self) -> str:
        return hashlib.sha1(self.png).hexdigest()


def parse_chat_body(body: object) -> PageRequest:
    """Read an olmOCR-style request: text part(s) and one data:image/png;base64 image."""
    if not isinstance(body, Mapping):
        raise BadRequest("body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    text_chars = 0
    images: list[str] = []
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            text_chars += len(content)
            continue
        if not isinstance(content, list):
            raise BadRequest("message content must be a string or a list of parts")
        for part in content:
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind == "text" and isinstance(part.get("text"), str):
                text_chars += len(part["text"])
            elif kind == "image_url" and isinstance(part.get("image_url"), Mapping):
                url = part["image_url"].get("url")
                if not isinstance(url, str):
                    raise BadRequest("image_url.url must be a string")
                images.append(url)
            else:
                raise BadRequest(f"unsupported content part: {kind!r}")
    if len(images) != 1:
        raise BadRequest(f"expected exactly one image, got {len(images)}")
    png = _decode_png_data_url(images[0])
    try:
        width, height = png_size(png)
        prompt_tokens(width, height, text_chars)  # validates the size like the processor
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    temperature = body.get("temperature", 1.0)  # vLLM's default sampling temperature
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or temperature < 0:
        raise BadRequest("temperature must be a number >= 0")
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise BadRequest("max_tokens must be an integer >= 1")
    return PageRequest(png, width, height, text_chars, float(temperature), max_tokens)


def _decode_png_data_url(url: str) -> bytes:
    prefix = "data:image/png;base64,"
    if not url.startswith(prefix):
        raise BadRequest("image_url must be a data:image/png;base64 URL")
    try:
        return base64.b64decode(url[len(prefix):], validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("image_url holds invalid base64") from None


def reply_content(page: PageRequest, completion_tokens: int, config: SimConfig) -> str:
    """The model's text: front matter (unless garbage is injected), page line, filler."""
    marker = f"page {page.digest[:16]}"
    garbage = page.temperature < config.garbage_below_temperature
    rotated = config.rotate_landscape and page.width > page.height
    reply = PageReply(
        primary_language="en",
        is_rotation_valid=not rotated,
        rotation_correction=90 if rotated else 0,
        is_table=False,
        is_diagram=False,
        text=marker,
    )
    head = marker if garbage else format_reply_text(reply)
    room = completion_tokens * CHARS_PER_TOKEN - len(head) - 1
    return head + "\n" + _filler(room) if room > 0 else head


def _filler(chars: int) -> str:
    repeats = chars // len(_FILLER) + 1
    return (_FILLER * repeats)[:chars].rstrip() or "."


def completion_body(req_id: str, model: str, page: PageRequest, done: Finished, config: SimConfig) -> dict[str, Any]:
    """An OpenAI chat.completion object, as vLLM returns it."""
    return {
        "id": req_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": reply_content(page, done.completion_tokens, config),
                },
                "logprobs": None,
                "finish_reason": done.finish_reason,
                "stop_reason": None,
            }
        ],
        "usage": {
            "prompt_tokens": done.prompt_tokens,
            "completion_tokens": done.completion_tokens,
            "total_tokens": done.prompt_tokens + done.completion_tokens,
        },
    }


def _error(status: int, message: str, kind: str) -> JSONResponse:
    """vLLM's ErrorResponse shape."""
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return JSONResponse(body, status_code=status)


# --- metrics ---------------------------------------------------------------------------


class VllmMetricsCollector(Collector):
    """vLLM V1's Prometheus metrics (vllm/v1/metrics/loggers.py names) from a snapshot."""

    def __init__(self, snapshot: Callable[[], MetricsSnapshot], model_name: str) -> None:
        self._snapshot = snapshot
        self._model_name = model_name

    def collect(self) -> Iterator[Metric]:
        s = self._snapshot()
        labels = ["model_name", "engine"]
        values = [self._model_name, "0"]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=labels)
            family.add_metric(values, value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=labels)
            family.add_metric(values, value)
            return family

        yield gauge("vllm:num_requests_running", "Number of requests in model execution batches.", s.running)
        yield gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", s.waiting)
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage)
        yield counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", s.preemptions_total)
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens_total)
        yield counter("vllm:generation_tokens", "Number of generation tokens processed.", s.generation_tokens_total)
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*labels, "finished_reason"],
        )
        for reason in FINISH_REASONS:
            success.add_metric([*values, reason], s.request_success_total[reason])
        yield success
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=["block_size", "num_gpu_blocks", "cache_dtype", "enable_prefix_caching", "engine"],
        )
        info.add_metric([str(s.block_size), str(s.num_gpu_blocks), "auto", "False", "0"], 1)
        yield info
        # Not vLLM metrics: what only a simulator can see, under its own prefix.
        yield counter(
            "pagegate_sim:recomputed_tokens",
            "Tokens whose KV was thrown away by preemption and computed again.",
            s.recomputed_tokens_total,
        )
        yield gauge("pagegate_sim:host_memory_mb", "Host RAM held by requests in flight.", s.host_mem_mb)
        yield gauge(
            "pagegate_sim:peak_waiting",
            "Most requests ever waiting at once since start (a high-water mark no scrape misses).",
            s.peak_waiting,
        )
        yield gauge(
            "pagegate_sim:peak_kv_cache_usage_perc",
            "Highest KV cache usage since start, 0..1.",
            s.peak_kv_usage,
        )


# --- the app ---------------------------------------------------------------------------


def default_clock(config: SimConfig) -> Clock:
    return MonotonicClock() if config.time_scale == 1.0 else ScaledClock(config.time_scale)


def build_app(config: SimConfig, clock: Clock | None = None) -> Starlette:
    """The simulator as an ASGI app; `app.state.engine` is its `SimEngine`.

    Works under uvicorn and under httpx.ASGITransport (which runs no lifespan: the engine
    task starts with the first chat request).
    """
    engine = SimEngine(config, clock or default_clock(config))
    name = config.served_model_name
    registry = CollectorRegistry(auto_describe=False)
    registry.register(VllmMetricsCollector(engine.refresh, name))

    async def chat_completions(request: Request) -> Response:
        if engine.crashed:
            return _error(500, "EngineCore encountered an issue.", "EngineDeadError")
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _error(400, "body is not valid JSON", "BadRequestError")
        try:
            page = parse_chat_body(body)
        except BadRequest as exc:
            return _error(400, str(exc), "BadRequestError")
        engine.requests_seen += 1
        number = engine.requests_seen
        every = config.reject_status_every
        if every and number % every == 0:
            return _error(503, "simulated capacity rejection", "ServiceUnavailableError")
        prompt = prompt_tokens(page.width, page.height, page.text_chars)
        max_tokens = page.max_tokens or max(1, engine.profile.max_model_len - prompt)
        req_id = f"chatcmpl-{number:08d}"
        try:
            future = engine.submit(req_id, prompt, output_tokens(config.seed, page.digest), max_tokens)
        except RequestTooLongError as exc:
            return _error(400, str(exc), "BadRequestError")
        except QueueFullError as exc:
            return _error(503, str(exc), "ServiceUnavailableError")
        except EngineDeadError:
            return _error(500, "EngineCore encountered an issue.", "EngineDeadError")
        try:
            finished = await _until_done_or_disconnected(request, future)
        except EngineDeadError:
            return _error(500, "EngineCore encountered an issue.", "EngineDeadError")
        except asyncio.CancelledError:
            engine.abort(req_id)
            raise
        if finished is None:
            engine.abort(req_id)
            return Response(status_code=499)
        return JSONResponse(completion_body(req_id, name, page, finished, config))

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
        engine.refresh()
        return Response(status_code=503 if engine.crashed else 200)

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

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
        raise SimulatorCrashed(engine.model.crash_reason or "engine died")


def ready_line(config: SimConfig, root_url: str) -> str:
    return f"pagegate sim: serving {config.profile} on {root_url}/v1 (time scale {config.time_scale:g})"


