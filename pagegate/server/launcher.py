"""`vllm serve` as a managed child process: start, wait until ready, warm up, stop.

The launch sets vLLM's queue cap (`queue_cap` in settings.py) and logs what it chose;
once the server is up, the launcher reads the server's own numbers from /metrics
(`vllm:cache_config_info`: KV cache size in tokens) and logs how many pages the cache
holds next to the cap, warning when the cap would keep the engines below their KV room.

Readiness is checked the way olmOCR does it (GET /v1/models until the model is listed,
`vllm_server_ready` in allenai/olmocr `olmocr/pipeline.py`) plus vLLM's /health (200 once
the engine is up, 503 when it died; vllm-project/vllm PR #24897). Then one tiny page goes
through the normal chat request, so the first real pages do not pay for CUDA graph
capture and the image processor's first use.

The server runs in its own process group: vLLM starts engine-core and worker children,
and a stop must reach them all, or a restarted server finds the GPU still taken. If
pagegate itself is killed (kill -9, OOM killer) a small reaper process kills that group
(pagegate/server/reaper.py; Linux only). Its
merged stdout/stderr is read line by line into the `pagegate.vllm` logger, which the CLI
routes into the Prefect run log (PREFECT_LOGGING_EXTRA_LOGGERS=pagegate).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import io
import logging
import os
import signal
import sys
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from pagegate.clock import Clock, MonotonicClock
from pagegate.errors import ServerLaunchError
from pagegate.server.settings import (
    VllmSettings,
    queue_cap,
    vllm_argv,
    vllm_env,
    with_profile_args,
)
from pagegate.vlm.chat import build_chat_request
from pagegate.vlm.profiles import get_profile

SERVER_LOG = logging.getLogger("pagegate.vllm")
log = logging.getLogger("pagegate.server")

LINE_LIMIT = 1 << 20  # longer output lines are logged in pieces, never left in the pipe
WARMUP_MAX_TOKENS = 16  # enough to run the whole pipeline once, short enough to be quick
TOKENS_PER_PAGE = 2_500
"""KV an olmOCR page holds when it finishes: ~1,800 prompt + ~700 output tokens
(docs/simulator.md, "Profiles")."""
CACHE_CONFIG = "vllm:cache_config_info"


def kv_capacity_tokens(metrics_text: str) -> int | None:
    """KV tokens per engine from `vllm:cache_config_info` (its `kv_cache_size_tokens`, else
    `num_gpu_blocks x block_size`); None when the page does not say."""
    try:
        for family in text_string_to_metric_families(metrics_text):
            for sample in family.samples:
                if sample.name != CACHE_CONFIG:
                    continue
                labels = sample.labels
                if labels.get("kv_cache_size_tokens", "None").isdigit():
                    return int(labels["kv_cache_size_tokens"])
                blocks, size = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
                if blocks.isdigit() and size.isdigit():
                    return int(blocks) * int(size)
    except ValueError:
        return None
    return None


def describe_cap(cap: int | None, kv_tokens: int | None, engines: int) -> tuple[str, bool]:
    """The log line about the cap next to the KV room, and whether it is a warning."""
    if kv_tokens is None:
        return "the server does not report its KV cache size (vllm:cache_config_info)", False
    pages = kv_tokens * engines // TOKENS_PER_PAGE
    room = f"the KV cache holds ~{pages} pages of {TOKENS_PER_PAGE} tokens"
    if cap is None:
        return f"{room}; no queue cap", False
    if cap < pages:
        return (f"{room}, more than the queue cap {cap}: the cap keeps the engines below "
                "their KV room; set max_num_queued_reqs (or --max-num-seqs) higher"), True
    return f"{room}; queue cap {cap} leaves {cap - pages} requests of queue", False


def warmup_png(side: int = 64) -> bytes:
    """A small blank page (at least 28 px a side, the vision tower's patch merge size)."""
    from PIL import Image  # only for the warm-up page: the run's process needs no PIL

    buffer = io.BytesIO()
    Image.new("RGB", (side, side), "white").save(buffer, format="PNG")
    return buffer.getvalue()


def models_listed(body: Any) -> set[str]:
    """Model ids in a /v1/models answer (OpenAI's {"data": [{"id": ...}]}); empty if malformed."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return set()
    return {card["id"] for card in data if isinstance(card, dict) and isinstance(card.get("id"), str)}


class VllmLauncher:
    """One server process at a time; `start()` returns once it is ready and warmed up."""

    def __init__(
        self,
        settings: VllmSettings,
        *,
        http: httpx.AsyncClient,
        clock: Clock | None = None,
        profile: str = "olmocr-2",
        ready_timeout_seconds: float = 1200.0,
        stop_timeout_seconds: float = 10.0,
        probe_timeout_seconds: float = 10.0,
    ) -> None:
        self._profile = get_profile(profile)
        self.settings = with_profile_args(settings, self._profile.serve_args)
        self._http = http
        self._clock: Clock = clock or MonotonicClock()
        self._ready_timeout = ready_timeout_seconds
        self._stop_timeout = stop_timeout_seconds
        self._probe_timeout = probe_timeout_seconds
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._reaper: asyncio.subprocess.Process | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=40)
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None

    @property
    def returncode(self) -> int | None:
        return self._process.returncode if self._process is not None else None

    def log_tail(self) -> str:
        return "\n".join(self._tail)

    async def start(self) -> None:
        """Launch, wait for readiness and warm up; ServerLaunchError if it cannot be had."""
        if self.alive:
            raise RuntimeError("the server is already running")
        argv = vllm_argv(self.settings)
        gpus = f" on GPU {self.settings.gpus}" if self.settings.gpus is not None else ""
        cap, why = queue_cap(self.settings)
        log.info("queue cap: %s (%s)", f"--max-num-queued-reqs {cap}" if cap else "none", why)
        log.info("starting server%s: %s", gpus, " ".join(argv))
        self._tail.clear()
        try:
            self._process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                limit=LINE_LIMIT,
                env=vllm_env(self.settings, os.environ),
            )
        except OSError as exc:
            raise ServerLaunchError(f"cannot run {argv[0]!r}: {exc}") from exc
        self.starts += 1
        self._reader = asyncio.create_task(self._stream_output(self._process))
        self._reaper = await self._start_reaper(self._process.pid)
        try:
            await self._wait_ready()
            await self._warm_up()
        except BaseException:
            await self.stop()
            raise
        log.info("server ready on %s (pid %s)", self.settings.base_url, self.pid)
        await self._log_kv_room(cap)

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def stop(self) -> None:
        """SIGTERM to the whole process group, then SIGKILL after the grace time."""
        process = self._process
        if process is not None and process.returncode is None:
            self._signal(process, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), self._stop_timeout)
            except TimeoutError:
                log.warning("server ignored SIGTERM for %.0f s; killing it", self._stop_timeout)
                self._signal(process, signal.SIGKILL)
                await process.wait()
        elif process is not None:
            # The leader is gone (crash, kill -9); its children may not be.
            self._signal(process, signal.SIGKILL)
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        reaper, self._reaper = self._reaper, None
        if reaper is not None and reaper.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                reaper.kill()  # SIGKILL: its SIGTERM handler would kill the (gone) group
            await reaper.wait()

    @staticmethod
    async def _start_reaper(group: int) -> asyncio.subprocess.Process | None:
        """The process that kills the server's group if pagegate dies (None: not started)."""
        try:
            return await asyncio.create_subprocess_exec(
                sys.executable, "-m", "pagegate.server.reaper", str(os.getpid()), str(group),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
        except OSError as exc:
            log.warning("no reaper for the server's processes: %s", exc)
            return None

    @staticmethod
    def _signal(process: asyncio.subprocess.Process, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)

    async def _stream_output(self, process: asyncio.subprocess.Process) -> None:
        """Drain the server's output until it closes: a full pipe would block the server."""
        stream = process.stdout
        assert stream is not None
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # a line over LINE_LIMIT: take what is buffered as a piece
                raw = await stream.read(LINE_LIMIT)
            if not raw:
                return
            line = raw.decode(errors="replace").rstrip()
            if line:
                self._tail.append(line)
                SERVER_LOG.info("%s", line)

    async def _output_drained(self, limit_seconds: float = 5.0) -> None:
        """Let the reader take the last lines of an exited server (for the error message)."""
        if self._reader is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._reader), limit_seconds)

    async def _wait_ready(self) -> None:
        deadline = self._clock.now() + self._ready_timeout
        root = self.settings.root_url
        name = self.settings.served_model_name
        while True:
            if not self.alive:
                await self._output_drained()
                raise ServerLaunchError(
                    f"server exited with status {self.returncode} before it was ready:\n"
                    f"{self.log_tail()}"
                )
            if await self._is_ready(root, name):
                return
            if self._clock.now() >= deadline:
                raise ServerLaunchError(
                    f"server not ready within {self._ready_timeout:.0f} s:\n{self.log_tail()}"
                )
            await self._clock.sleep(0.2)

    async def _is_ready(self, root: str, name: str) -> bool:
        try:
            health = await self._http.get(f"{root}/health", timeout=self._probe_timeout)
            if health.status_code != 200:
                return False
            models = await self._http.get(f"{root}/v1/models", timeout=self._probe_timeout)
        except httpx.TransportError:
            return False
        return models.status_code == 200 and name in models_listed(models.json())

    async def _log_kv_room(self, cap: int | None) -> None:
        """The server's KV room in pages next to the cap (information; never fails a start)."""
        try:
            text = (await self._http.get(f"{self.settings.root_url}/metrics",
                                         timeout=self._probe_timeout)).text
        except httpx.HTTPError as exc:
            log.info("could not read the server's KV cache size: %r", exc)
            return
        line, warn = describe_cap(cap, kv_capacity_tokens(text),
                                  self.settings.data_parallel_size or 1)
        (log.warning if warn else log.info)("%s", line)

    async def _warm_up(self) -> None:
        body = build_chat_request(
            self._profile, model=self.settings.served_model_name, image_png=warmup_png(),
            temperature=0.0,
        )
        body["max_tokens"] = WARMUP_MAX_TOKENS
        started = self._clock.now()
        try:
            response = await self._http.post(
                f"{self.settings.base_url}/chat/completions", json=body, timeout=self._ready_timeout
            )
        except httpx.HTTPError as exc:
            raise ServerLaunchError(f"warm-up request failed: {exc!r}") from exc
        if response.status_code != 200:
            raise ServerLaunchError(
                f"warm-up request answered HTTP {response.status_code}: {response.text[:200]}"
            )
        log.info("warm-up request answered in %.2f s", self._clock.now() - started)
