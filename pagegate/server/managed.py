"""Launched and supervised servers for the length of a run (async context managers).

One server, or one per GPU (`gpus`): each gets CUDA_VISIBLE_DEVICES and its own port
(consecutive from `port`), its own watchdog, and the run routes pages over them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import httpx

from pagegate.clock import Clock
from pagegate.server.launcher import VllmLauncher
from pagegate.server.settings import VllmSettings, parse_gpus
from pagegate.server.watchdog import Supervisor, WatchdogConfig, WatchLimits


@dataclass(frozen=True)
class ManagedServerHandle:
    launcher: VllmLauncher
    supervisor: Supervisor

    @property
    def base_url(self) -> str:
        return self.launcher.settings.base_url


@contextlib.asynccontextmanager
async def open_managed_server(
    settings: VllmSettings,
    *,
    http: httpx.AsyncClient,
    clock: Clock,
    watchdog: WatchdogConfig | None = None,
    profile: str = "olmocr-2",
    ready_timeout_seconds: float = 1200.0,
    stop_timeout_seconds: float = 10.0,
) -> AsyncIterator[ManagedServerHandle]:
    """Start the server (ready and warmed up), supervise it, and stop both on exit."""
    async with open_managed_servers(
        [settings], http=http, clock=clock, watchdog=watchdog, profile=profile,
        ready_timeout_seconds=ready_timeout_seconds, stop_timeout_seconds=stop_timeout_seconds,
    ) as [server]:
        yield server


@contextlib.asynccontextmanager
async def open_managed_servers(
    settings: Sequence[VllmSettings],
    *,
    http: httpx.AsyncClient,
    clock: Clock,
    watchdog: WatchdogConfig | None = None,
    profile: str = "olmocr-2",
    ready_timeout_seconds: float = 1200.0,
    stop_timeout_seconds: float = 10.0,
) -> AsyncIterator[list[ManagedServerHandle]]:
    """Start every server at once (vLLM takes minutes to load), supervise each, stop all.

    If one cannot start, the others are stopped and its ServerLaunchError is raised.
    """
    launchers = [
        VllmLauncher(one, http=http, clock=clock, profile=profile,
                     ready_timeout_seconds=ready_timeout_seconds,
                     stop_timeout_seconds=stop_timeout_seconds)
        for one in settings
    ]
    watchers: list[asyncio.Task[None]] = []
    try:
        started = await asyncio.gather(*(lr.start() for lr in launchers), return_exceptions=True)
        for outcome in started:
            if isinstance(outcome, BaseException):
                raise outcome
        handles = []
        for launcher in launchers:
            supervisor = Supervisor(launcher, root_url=launcher.settings.root_url, http=http,
                                    clock=clock, config=watchdog)
            watchers.append(asyncio.create_task(
                supervisor.run(), name=f"pagegate-server-watchdog-{launcher.settings.port}"
            ))
            handles.append(ManagedServerHandle(launcher, supervisor))
        yield handles
    finally:
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await asyncio.gather(*(lr.stop() for lr in launchers))


@dataclass(frozen=True)
class ManagedServerConfig:
    """A server pagegate launches and supervises for one run."""

    vllm: VllmSettings
    watchdog: WatchdogConfig = field(default_factory=WatchdogConfig)
    ready_timeout_seconds: float = 1200.0
    stop_timeout_seconds: float = 10.0
    per_gpu: tuple[str, ...] = ()  # one server per item (CUDA_VISIBLE_DEVICES), ports from vllm.port

    def server_settings(self) -> list[VllmSettings]:
        """The settings of each server to launch: one, or one per GPU on consecutive ports."""
        if not self.per_gpu:
            return [self.vllm]
        return [replace(self.vllm, port=self.vllm.port + i, gpus=gpus)
                for i, gpus in enumerate(self.per_gpu)]


_WATCHDOG_KEYS = {
    "watchdog_interval_seconds", "hang_after_seconds", "unresponsive_after_seconds",
    "restart_budget", "restart_refill_seconds",
}
_LAUNCH_KEYS = {"ready_timeout_seconds", "stop_timeout_seconds"}


def managed_server_config(params: Mapping[str, Any]) -> ManagedServerConfig:
    """The flow parameter `launch_server` (flat names) as settings; unknown names are errors."""
    vllm_keys = {f.name for f in fields(VllmSettings)}
    unknown = sorted(set(params) - vllm_keys - _WATCHDOG_KEYS - _LAUNCH_KEYS)
    if unknown:
        raise ValueError(f"unknown launch_server settings: {', '.join(unknown)}")
    vllm_values = {k: v for k, v in params.items() if k in vllm_keys and k != "gpus"}
    if "extra_args" in vllm_values:
        vllm_values["extra_args"] = tuple(vllm_values["extra_args"])
    default = WatchdogConfig()
    watchdog = WatchdogConfig(
        interval_seconds=float(params.get("watchdog_interval_seconds", default.interval_seconds)),
        probe_timeout_seconds=default.probe_timeout_seconds,
        limits=WatchLimits(
            hang_after=float(params.get("hang_after_seconds", default.limits.hang_after)),
            unanswered_after=float(
                params.get("unresponsive_after_seconds", default.limits.unanswered_after)
            ),
        ),
        restart_capacity=int(params.get("restart_budget", default.restart_capacity)),
        restart_refill_seconds=float(
            params.get("restart_refill_seconds", default.restart_refill_seconds)
        ),
    )
    gpus = params.get("gpus")
    per_gpu = parse_gpus(gpus) if gpus not in (None, "", []) else ()
    if len(per_gpu) == 1:  # one server: it just gets CUDA_VISIBLE_DEVICES
        vllm_values["gpus"], per_gpu = per_gpu[0], ()
    return ManagedServerConfig(
        vllm=VllmSettings(**vllm_values),
        per_gpu=per_gpu,
        watchdog=watchdog,
        ready_timeout_seconds=float(params.get("ready_timeout_seconds", 1200.0)),
        stop_timeout_seconds=float(params.get("stop_timeout_seconds", 10.0)),
    )
