"""The gate's settings: what GateConfig accepts, its derived bounds, and GateTuning kept whole."""

from __future__ import annotations

from dataclasses import asdict, fields

import pytest

from pagegate.admission.policy import GateConfig, GateTuning


@pytest.mark.parametrize(
    ("config", "start"),
    [
        (GateConfig(), 4),
        (GateConfig(initial_concurrency=16), 16),
        (GateConfig(max_in_flight_pages=3), 3),           # never above the cap
    ],
)
def test_c_start_which_is_also_its_floor(config: GateConfig, start: int) -> None:
    assert config.concurrency_start == start


def test_asdict_keeps_the_tuning_whole() -> None:
    """A field-by-field diff against the defaults (the bench's reports, the tests' scaled
    configs passed as gate_overrides) sees one value, and none when it is the default."""
    def diff(config: GateConfig) -> dict[str, object]:
        return {k: v for k, v in asdict(config).items() if v != getattr(GateConfig(), k)}

    assert diff(GateConfig(cooldown_seconds=2.0)) == {"cooldown_seconds": 2.0}
    tuned = GateTuning(pace_min_rate=3.0)
    assert diff(GateConfig(tuning=tuned)) == {"tuning": tuned}


def test_the_config_holds_the_user_settings_and_one_tuning() -> None:
    names = [f.name for f in fields(GateConfig)]
    assert names[-1] == "tuning" and len(names) == 15
    assert not set(names) & set(GateTuning._fields)
