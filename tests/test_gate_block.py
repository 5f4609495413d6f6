"""The AdmissionGate block against a real Prefect API: register, save, load, build a gate."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from pagegate.admission import GateConfig
from pagegate.admission.build import apply_overrides
from pagegate.config import RunConfig
from pagegate.tasks.gate_param import load_gate_block

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]


def test_block_registers_from_the_documented_command() -> None:
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    proc = subprocess.run(
        [sys.executable, "-m", "prefect", "block", "register", "-m", "pagegate.tasks.admission_block"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pagegate Admission Gate" in proc.stdout


def test_saved_block_round_trips_into_the_runtime_config() -> None:
    from pagegate.tasks.admission_block import AdmissionGate

    AdmissionGate(cooldown_seconds=7.5, peak_ratio=0.2, max_in_flight_pages=300).save(
        "small-gpu", overwrite=True
    )
    block = asyncio.run(load_gate_block("small-gpu"))
    config = block.to_config()
    assert (config.cooldown_seconds, config.peak_ratio, config.max_in_flight_pages) == (7.5, 0.2, 300)
    assert asyncio.run(load_gate_block(None)).to_config() == AdmissionGate().to_config()


def test_cli_overrides_replace_block_values_and_reject_unknown_names() -> None:
    config = apply_overrides(GateConfig(), {"cooldown_seconds": 3.0, "metrics_url": "http://x/metrics"})
    assert config.cooldown_seconds == 3.0
    with pytest.raises(ValueError, match="cooldwon"):
        apply_overrides(GateConfig(), {"cooldwon": 3.0})
    with pytest.raises(ValueError):
        apply_overrides(GateConfig(), {"peak_ratio": 2.0})
    assert RunConfig(sources=("x",), workspace="w").use_gate
