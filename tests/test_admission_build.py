"""Building a run's admission from plain settings (pagegate.admission.build), no Prefect."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from pagegate.admission import FixedLimit, GateConfig
from pagegate.admission.build import (
    GateSettings,
    apply_overrides,
    gate_metrics_url,
    launch_config,
    open_admission,
    run_gate_config,
)
from pagegate.admission.router import Router
from pagegate.clock import FakeClock
from pagegate.config import RunConfig


def run(**values: Any) -> RunConfig:
    return RunConfig(sources=("s3://b/in/",), workspace="w", **values)


@pytest.mark.parametrize(
    ("block_url", "overrides", "servers", "expected"),
    [
        (None, {}, (), "http://127.0.0.1:8000/metrics"),                  # derived
        ("http://m:9/metrics", {}, (), "http://m:9/metrics"),             # the block's
        ("http://m:9/metrics", {"metrics_url": "http://o/metrics"}, (), "http://o/metrics"),
        ("http://m:9/metrics", {}, ("http://a:1/v1", "http://b:2/v1"), "http://a:1/metrics"),
    ],
)
def test_which_metrics_url_a_gate_polls(
    block_url: str | None, overrides: dict[str, Any], servers: tuple[str, ...], expected: str
) -> None:
    config = run(gate_overrides=overrides, server_urls=servers)
    settings = GateSettings(metrics_url=block_url)
    assert gate_metrics_url(settings, config, config.servers[0]) == expected


def test_overrides_replace_fields_and_unknown_names_are_refused() -> None:
    assert apply_overrides(GateConfig(), {"cooldown_seconds": 3.0}).cooldown_seconds == 3.0
    assert apply_overrides(GateConfig(), {"metrics_url": "http://x"}) == GateConfig()
    with pytest.raises(ValueError, match="cooldwon"):
        apply_overrides(GateConfig(), {"cooldwon": 3.0})
    with pytest.raises(ValueError, match="tuning"):  # the controller's constants: no user's
        apply_overrides(GateConfig(), {"tuning": {"pace_gain": 2.0}})


def test_overrides_reach_the_gate_under_the_runs_deadline() -> None:
    config = run(gate_overrides={"cooldown_seconds": 4.0}, server_unavailable_after_seconds=60.0)
    gate = run_gate_config(GateConfig(unavailable_after_seconds=900.0), config)
    assert (gate.cooldown_seconds, gate.unavailable_after_seconds) == (4.0, 60.0)


def test_a_short_request_timeout_lowers_the_latency_limit_unless_it_is_overridden() -> None:
    default = run_gate_config(GateConfig(), run())
    assert default.page_latency_limit_seconds == 150.0            # 600 s / 4
    short = run_gate_config(GateConfig(), run(request_timeout_seconds=120.0))
    assert short.page_latency_limit_seconds == 30.0
    set_here = run_gate_config(GateConfig(), run(request_timeout_seconds=120.0,
                                                 gate_overrides={"page_latency_limit_seconds": 90.0}))
    assert set_here.page_latency_limit_seconds == 90.0
    off = run_gate_config(GateConfig(page_latency_limit_seconds=None), run())
    assert off.page_latency_limit_seconds is None


def test_launch_settings_take_the_blocks_watchdog_values_where_unset() -> None:
    assert launch_config(None, {"restart_budget": 2}) is None
    assert launch_config({}, {"restart_budget": 2}) is None
    merged = launch_config({"model": "m", "restart_budget": 7},
                           {"restart_budget": 2, "hang_after_seconds": 45.0})
    assert merged is not None
    assert (merged.watchdog.restart_capacity, merged.watchdog.limits.hang_after) == (7, 45.0)


def _opened(config: RunConfig) -> Any:
    async def scenario() -> Any:
        async with (
            httpx.AsyncClient() as http,
            open_admission(config, GateSettings(), http=http, clock=FakeClock()) as admission,
        ):
            return admission, admission.snapshot()

    return asyncio.run(scenario())


def test_without_the_gate_each_server_gets_a_fixed_cap() -> None:
    one, _ = _opened(run(use_gate=False, max_concurrent_requests=7))
    assert isinstance(one, FixedLimit)
    several, snapshot = _opened(
        run(use_gate=False, server_urls=("http://a:1/v1", "http://b:2/v1"))
    )
    assert isinstance(several, Router)
    assert [s["url"] for s in snapshot["servers"]] == ["http://a:1/v1", "http://b:2/v1"]


def test_a_metrics_url_override_with_several_servers_is_refused() -> None:
    config = run(server_urls=("http://a:1/v1", "http://b:2/v1"),
                 gate_overrides={"metrics_url": "http://a:1/metrics"})
    with pytest.raises(ValueError, match="names one server"):
        _opened(config)
