"""bench.ablation's switches: each part's switch takes effect inside and is undone after."""

from __future__ import annotations

import pytest

from bench.ablation import PART_NAMES, PARTS, located, switched_off
from pagegate.admission.policy import GateConfig


def _seen(part_name: str) -> tuple[GateConfig, list[object]]:
    part = PART_NAMES[part_name]
    attrs = [getattr(*located(target)) for target, _ in part.patches]
    return GateConfig(), attrs


@pytest.mark.parametrize("name", [p.name for p in PARTS[1:]])
def test_each_switch_changes_the_gate_inside_and_nothing_after(name: str) -> None:
    before_config, before_attrs = _seen(name)
    with switched_off(PART_NAMES[name]):
        inside_config, inside_attrs = _seen(name)
    after_config, after_attrs = _seen(name)

    part = PART_NAMES[name]
    for key, value in part.tuning.items():
        assert getattr(inside_config.tuning, key) == value != getattr(before_config.tuning, key)
    for key, value in part.config.items():
        assert getattr(inside_config, key) == value != getattr(before_config, key)
    assert all(a is not b for a, b in zip(inside_attrs, before_attrs, strict=True))
    assert part.tuning or part.config or part.patches
    assert after_config == before_config
    assert all(a is b for a, b in zip(after_attrs, before_attrs, strict=True))


def test_the_first_row_is_the_gate_as_shipped() -> None:
    assert not (PARTS[0].tuning or PARTS[0].config or PARTS[0].patches)
    assert len(PART_NAMES) == len(PARTS)  # one meaning per name
