"""The real-engine bench's summary: the gate against a strategy chosen once, not against
each round's luckiest run (bench/vllm_cpu.py, `best_strategy`)."""

from __future__ import annotations

from typing import Any

from bench.vllm_cpu import (
    best_strategy,
    interleaved,
    round_order,
    rounds_summary,
    with_gate_beside,
    yardstick_table,
)


def _round(gate: float, **runs: float) -> dict[str, Any]:
    rows: list[dict[str, Any]] = [{"run": name.replace("_", " "), "pages_per_s": rate} for name, rate in runs.items()]
    rows.append({"run": "gate", "pages_per_s": gate})
    best = max(rows[:-1], key=lambda r: r["pages_per_s"])
    return {"rows": rows, "yardstick": best, "gate_pages_per_s": gate,
            "gate_ratio": round(gate / best["pages_per_s"], 3), "gate_peak_waiting": 7}


def test_the_best_strategy_is_chosen_by_its_median_and_the_ratio_taken_per_round() -> None:
    # Two equally good strategies whose luck alternates: each round's best run is 12, the
    # typical run 10.5; the gate does as well as either of them typically does.
    rounds = [_round(10.5, loop_16=12.0, loop_32=10.0, deep_queue=9.0),
              _round(10.5, loop_16=10.0, loop_32=12.0, deep_queue=9.5),
              _round(11.0, loop_16=11.0, loop_32=10.5, deep_queue=9.0)]
    best = best_strategy(rounds)
    assert best is not None
    assert best["run"] == "loop 16"  # medians: 11.0 against 10.5 and 9.0
    assert best["ratios"] == [0.875, 1.05, 1.0]
    assert best["ratio"]["median"] == 1.0
    summary = rounds_summary(rounds)
    assert summary["ratio"]["median"] == 0.875  # against each round's luckiest run
    assert summary["best_strategy"] == best


def test_a_strategy_missing_from_a_round_is_not_a_candidate() -> None:
    rounds = [_round(10.0, loop_16=10.0, loop_64=20.0), _round(10.0, loop_16=10.0)]
    best = best_strategy(rounds)
    assert best is not None and best["run"] == "loop 16" and best["ratios"] == [1.0, 1.0]


def test_no_yardstick_runs_no_best_strategy() -> None:
    assert best_strategy([{"rows": [{"run": "gate", "pages_per_s": 3.0}],
                           "gate_pages_per_s": 3.0}]) is None


def test_interleaving_puts_the_gate_before_between_and_after_every_run() -> None:
    assert interleaved(["loop 4", "deep queue"]) == ["gate", "loop 4", "gate", "deep queue", "gate"]
    assert interleaved([]) == ["gate"]
    assert interleaved(["a", "b", "c"], every=2) == ["gate", "a", "b", "gate", "c", "gate"]


def test_every_other_round_runs_in_reverse_so_no_run_always_follows_the_same_one() -> None:
    first = round_order([16, 256], ("deep queue", "gate"), interleave=1, round_index=0)
    second = round_order([16, 256], ("deep queue", "gate"), interleave=1, round_index=1)
    assert first == ["gate", "closed loop 16", "gate", "closed loop 256", "gate", "deep queue", "gate"]
    assert second == ["gate", "deep queue", "gate", "closed loop 256", "gate", "closed loop 16", "gate"]
    assert round_order([4], ("deep queue", "gate"), round_index=3) == ["gate", "deep queue", "closed loop 4"]
    assert round_order([4], ("deep queue", "gate"), round_index=2) == ["closed loop 4", "deep queue", "gate"]


def test_each_run_is_compared_with_the_gate_runs_on_either_side_of_it() -> None:
    # The host slows down through the round: the gate's runs fall from 12 to 8, and each
    # yardstick run sits between two of them.
    rows = [{"run": "gate", "pages_per_s": 12.0}, {"run": "loop 4", "pages_per_s": 10.0},
            {"run": "gate", "pages_per_s": 10.0}, {"run": "deep queue", "pages_per_s": 10.0},
            {"run": "gate", "pages_per_s": 8.0}]
    beside = [b for b in with_gate_beside(rows) if "gate_beside" in b]
    assert [(b["run"], b["gate_beside"], b["gate_ratio_beside"]) for b in beside] == [
        ("loop 4", 11.0, 1.1), ("deep queue", 9.0, 0.9)]


def test_an_interleaved_round_takes_the_best_strategys_ratio_beside_it() -> None:
    one = _round(10.0, loop_16=12.0)
    one["rows"][0] |= {"gate_beside": 11.4, "gate_ratio_beside": 0.95}
    best = best_strategy([one])
    assert best is not None and best["ratios"] == [0.95]  # not 10.0 / 12.0


def test_the_table_gives_each_run_its_own_ratio_even_when_runs_share_a_name() -> None:
    rows = [{"run": "gate", "pages_per_s": 10.0, "peak_waiting": 8},
            {"run": "gate B", "pages_per_s": 10.0, "peak_waiting": 16},
            {"run": "gate", "pages_per_s": 12.0, "peak_waiting": 8},
            {"run": "gate B", "pages_per_s": 8.0, "peak_waiting": 16},
            {"run": "gate", "pages_per_s": 12.0, "peak_waiting": 8}]
    report = {"rows": with_gate_beside(rows), "yardstick": {"pages_per_s": 10.0}}
    table = yardstick_table(report)
    assert "11.00 / 10.00 = 1.100" in table and "12.00 / 8.00 = 1.500" in table
