"""Run settings around the server: the block's watchdog settings, the outage deadline, server lists."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from pagegate.admission.build import run_gate_config
from pagegate.clock import MonotonicClock
from pagegate.config import RunConfig
from pagegate.ocr.run import open_run_server
from pagegate.server.watchdog import WatchLimits
from pagegate.tasks.admission_block import AdmissionGate
from pagegate.tasks.gate_param import managed_server_for


def test_block_supervision_lists_only_what_it_sets() -> None:
    assert AdmissionGate().supervision() == {}
    block = AdmissionGate(hang_after_seconds=45, restart_budget=2)
    assert block.supervision() == {"hang_after_seconds": 45, "restart_budget": 2}


def test_launch_server_takes_the_blocks_watchdog_settings_unless_it_sets_them() -> None:
    assert asyncio.run(managed_server_for(None, None)) is None
    config = asyncio.run(managed_server_for({"model": "m", "restart_budget": 9}, None))
    assert config is not None
    assert config.watchdog.restart_capacity == 9
    assert config.watchdog.limits == WatchLimits()


def test_block_values_fill_unset_launch_values() -> None:
    from pagegate.server.managed import managed_server_config

    block = AdmissionGate(hang_after_seconds=45, restart_budget=2, restart_refill_seconds=30)
    merged = managed_server_config({**block.supervision(), "model": "m", "restart_budget": 7})
    assert merged.watchdog.limits.hang_after == 45
    assert (merged.watchdog.restart_capacity, merged.watchdog.restart_refill_seconds) == (7, 30)


@pytest.mark.parametrize(
    ("block_value", "run_value", "overrides", "expected"),
    [
        (900.0, 1800.0, {}, 900.0),        # the shorter deadline applies
        (900.0, 2.0, {}, 2.0),             # a small run deadline reaches pages at the gate
        (None, 60.0, {}, 60.0),            # "wait forever" at the gate: the run's deadline
        (900.0, 2.0, {"unavailable_after_seconds": 30.0}, 30.0),  # explicit override wins
    ],
)
def test_gate_deadline_never_outlasts_the_runs(
    block_value: float | None, run_value: float, overrides: dict[str, float], expected: float
) -> None:
    config = RunConfig(sources=("x",), workspace="w", server_unavailable_after_seconds=run_value,
                       gate_overrides=dict(overrides))
    gate = run_gate_config(AdmissionGate(unavailable_after_seconds=block_value).to_config(), config)
    assert gate.unavailable_after_seconds == expected


def test_several_servers_in_the_run_config() -> None:
    from pagegate.server.managed import managed_server_config

    assert RunConfig(sources=("x",), workspace="w").servers == ("http://127.0.0.1:8000/v1",)
    both = RunConfig(sources=("x",), workspace="w", server_urls=("http://a/v1", "http://b/v1"))
    assert both.servers == ("http://a/v1", "http://b/v1")
    with pytest.raises(ValueError, match="twice"):
        RunConfig(sources=("x",), workspace="w", server_urls=("http://a/v1", "http://a/v1"))
    launch_too = RunConfig(sources=("x",), workspace="w", server_urls=("http://a/v1", "http://b/v1"),
                           managed_server=managed_server_config({"model": "m"}))

    async def open_it() -> None:
        async with (
            httpx.AsyncClient() as http,
            open_run_server(launch_too, http=http, clock=MonotonicClock()),
        ):
            raise AssertionError("launched although server_urls were given")

    with pytest.raises(ValueError, match="exclude"):
        asyncio.run(open_it())
