"""A launched and supervised server for the length of a run (an async context manager)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import httpx

from pagegate.clock import Clock
from pagegate.config import RunConfig
from pagegate.server.launcher import VllmLauncher
from pagegate.server.settings import VllmSettings
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
    launcher = VllmLauncher(
        settings, http=http, clock=clock, profile=profile,
        ready_timeout_seconds=ready_timeout_seconds, stop_timeout_seconds=stop_timeout_seconds,
    )
    await launcher.start()
    supervisor = Supervisor(launcher, root_url=settings.root_url, http=http, clock=clock,
                            config=watchdog)
    task = asyncio.create_task(supervisor.run(), name="pagegate-server-watchdog")
    try:
        yield ManagedServerHandle(launcher, supervisor)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await launcher.stop()


@dataclass(frozen=True)
class ManagedServerConfig:
    """A server pagegate launches and supervises for one run."""

    vllm: VllmSettings
    watchdog: WatchdogConfig = field(default_factory=WatchdogConfig)
    ready_timeout_seconds: float = 1200.0
    stop_timeout_seconds: float = 10.0


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
    vllm_values = {k: v for k, v in params.items() if k in vllm_keys}
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
    return ManagedServerConfig(
        vllm=VllmSettings(**vllm_values),
        watchdog=watchdog,
        ready_timeout_seconds=float(params.get("ready_timeout_seconds", 1200.0)),
        stop_timeout_seconds=float(params.get("stop_timeout_seconds", 10.0)),
    )


@contextlib.asynccontextmanager
async def open_run_server(
    config: RunConfig, *, http: httpx.AsyncClient, clock: Clock
) -> AsyncIterator[RunConfig]:
    """The run's config, pointed at a launched server when it asks for one.

    Without `managed_server` the config comes back as it is (an external server).
    With it, the server is started (ready, warmed up) and supervised until exit, and
    the config's server_url and model name follow the launched server.
    """
    managed = config.managed_server
    if managed is None:
        yield config
        return
    async with open_managed_server(
        managed.vllm, http=http, clock=clock, watchdog=managed.watchdog, profile=config.profile,
        ready_timeout_seconds=managed.ready_timeout_seconds,
        stop_timeout_seconds=managed.stop_timeout_seconds,
    ) as server:
        yield replace(config, server_url=server.base_url, model=managed.vllm.served_model_name)
