"""How much of a server each admission strategy gets, in virtual time: exact, repeatable.

    python -m bench.admission                          # every named profile x every strategy
    python -m bench.admission --profiles rtx4090,h100 --json out.json --plot plots/
    python -m bench.admission --family 200 --seed 0 --jobs 2 --json family.json
    python -m bench.admission --family 100 --seeds 1,2,3,4,5 --jobs 2   # side by side

Each engine runs one workload (same pages, same seed) through each strategy with the
production page path in virtual time (pagegate/sim/virtual.py). Utilization is a run's
pages/s (pages over the time of the last one: ramp and drain included, as in any batch
job) over the engine's yardstick (pagegate/sim/yardstick.py): the best closed loop or
deep queue on the same engine, pages and seed, computed, never tuned. A run that crashed
or ran out of budget (3 x the yardstick's time) gets credit only for what it finished
within that time.

Strategies: pagegate (the production Gate, default GateConfig), sweep (the yardstick's
best closed loop itself), deep-queue, olmocr-2024 (olmOCR's work-group semaphore),
fixed-1600 (olmOCR's fixed cap). The family runs pagegate against the yardstick only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from pagegate.sim.engines import NAMED_PAGES, family_pages, named_engine, named_workload
from pagegate.sim.family import draw_engine
from pagegate.sim.profiles import ServerProfile
from pagegate.sim.strategies import STRATEGIES
from pagegate.sim.virtual import Run, Workload, run_virtual
from pagegate.sim.yardstick import Yardstick, page_costs, yardstick

SWEEP = "sweep"
ALL_STRATEGIES = ("pagegate", SWEEP, "deep-queue", "olmocr-2024", "fixed-1600")
BUDGET_FACTOR = 3.0
TARGET, FAMILY_SHARE, FAMILY_MEDIAN = 0.97, 0.95, 0.99
"""Issue targets: every named profile >= 0.97; >= 95 % of the family >= 0.97, median >= 0.99."""
RECORD_KEYS = ("engine", "strategy", "pages", "pages_done", "utilization", "crashes",
               "preemptions", "peak_waiting", "peak_in_flight", "seed", "pages_per_s", "wall_s")


def utilization(run: Run, stick: Yardstick, budget_s: float) -> float:
    """Pages/s over the yardstick's; a run that stopped early, its finished share."""
    return utilization_at(run, stick.pages_per_s, budget_s)


def utilization_at(run: Run, rate: float, budget_s: float) -> float:
    """`utilization` against a yardstick rate of `rate` pages/s."""
    if run.end == "finished":
        return run.pages_per_s / rate
    return run.pages_done / (rate * max(run.elapsed_s, run.pages / rate, min(budget_s, run.elapsed_s)))


def engine_of(name: str, seed: int) -> tuple[ServerProfile, Workload]:
    """A named profile or `family-<seed>-<index>`, with the workload this bench gives it."""
    if name in NAMED_PAGES:
        return named_engine(name), named_workload(name, seed)
    engine = draw_engine(seed, int(name.rsplit("-", 1)[1]))
    return engine.profile, Workload(family_pages(engine), group_pages=500, seed=seed)


def held_back(run: Run, stick: Yardstick) -> str:
    """What the trace says held the gate back: its ramp and how full it kept the server."""
    best = stick.best.concurrency or stick.best.pages
    target = 0.9 * best
    ramp = next((t for t, *_rest, in_flight, _c in run.trace if in_flight >= target), None)
    mean_in_flight = statistics.fmean(row[4] for row in run.trace) if run.trace else 0.0
    ramp_text = f"reached 90 % of x{best} at {ramp:.0f} s" if ramp is not None else f"never reached 90 % of x{best}"
    return (f"{ramp_text} of {run.elapsed_s:.0f} s; mean in flight {mean_in_flight:.0f}; "
            f"peak waiting {run.peak_waiting}; capacity retries {run.capacity_retries}")


def record(engine: str, run: Run, stick: Yardstick, budget_s: float, wall_s: float) -> dict[str, Any]:
    return {
        "engine": engine, "strategy": run.strategy, "pages": run.pages,
        "pages_done": run.pages_done, "utilization": round(utilization(run, stick, budget_s), 4),
        "crashes": int(run.crashed), "end": run.end, "preemptions": run.preemptions,
        "peak_waiting": run.peak_waiting, "peak_in_flight": run.peak_in_flight,
        "seed": run.seed, "pages_per_s": round(run.pages_per_s, 4),
        "elapsed_s": round(run.elapsed_s, 1), "capacity_retries": run.capacity_retries,
        "wall_s": round(wall_s, 2),
        "trace": [list(row) for row in run.trace],
    }


def sweep_record(engine: str, stick: Yardstick, seed: int, wall_s: float) -> dict[str, Any]:
    best = stick.best
    return {
        "engine": engine, "strategy": SWEEP, "pages": best.pages, "pages_done": best.pages,
        "utilization": 1.0, "crashes": 0, "end": "finished", "preemptions": best.preemptions,
        "peak_waiting": best.peak_waiting, "peak_in_flight": best.concurrency or best.pages,
        "seed": seed, "pages_per_s": round(best.pages_per_s, 4),
        "elapsed_s": round(best.elapsed_s, 1), "capacity_retries": 0, "wall_s": round(wall_s, 2),
        "best": best.label,
        "candidates": [[c.concurrency, round(c.pages_per_s, 4), c.crashed] for c in stick.candidates],
    }


def judge(name: str, profile: ServerProfile, workload: Workload,
          strategies: Sequence[str]) -> list[dict[str, Any]]:
    """The yardstick, then each strategy, on one engine."""
    started = time.perf_counter()
    stick = yardstick(profile, page_costs(workload, profile))
    records = [sweep_record(name, stick, workload.seed, time.perf_counter() - started)]
    budget_s = BUDGET_FACTOR * workload.pages / stick.pages_per_s
    for strategy in strategies:
        if strategy == SWEEP:
            continue
        started = time.perf_counter()
        run = run_virtual(profile, STRATEGIES[strategy](), workload, strategy_name=strategy,
                          budget_s=budget_s)
        records.append(record(name, run, stick, budget_s, time.perf_counter() - started))
        if strategy == "pagegate":
            records[-1]["held_back"] = held_back(run, stick)
    return records


def judge_family_engine(seed: int, index: int) -> dict[str, Any]:
    engine = draw_engine(seed, index)
    _, workload = engine_of(engine.profile.name, seed)
    records = judge(engine.profile.name, engine.profile, workload, ["pagegate"])
    gate = next(r for r in records if r["strategy"] == "pagegate")
    gate["parameters"] = engine.describe()
    gate["yardstick"] = records[0]["best"]
    gate["yardstick_preemptions"] = records[0]["preemptions"]
    return gate


# ------------------------------------------------------------------ reports


def _fmt(value: float | int | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def named_table(records: Sequence[dict[str, Any]]) -> str:
    """One row per engine and strategy, as BENCHMARKS.md shows them."""
    lines = ["| engine | strategy | pages done | pages/s | utilization | crashes | preemptions "
             "| peak waiting | peak in flight |", "|" + "---|" * 9]
    for r in records:
        util = "yardstick" if r["strategy"] == SWEEP else f"{r['utilization']:.3f}"
        label = f"sweep ({r['best']})" if r["strategy"] == SWEEP else r["strategy"]
        lines.append(f"| {r['engine']} | {label} | {r['pages_done']}/{r['pages']} | "
                     f"{r['pages_per_s']:.3f} | {util} | {r['crashes']} | {r['preemptions']} | "
                     f"{r['peak_waiting']} | {r['peak_in_flight']} |")
    return "\n".join(lines)


def family_summary(records: Sequence[dict[str, Any]], seed: int) -> str:
    utils = sorted(r["utilization"] for r in records)
    share = sum(u >= TARGET for u in utils) / len(utils)
    crashes = sum(r["crashes"] for r in records)
    worst = sorted(records, key=lambda r: r["utilization"])[:5]
    lines = [
        f"family of {len(records)} engines, seed {seed}: crashes {crashes}; "
        f">= {TARGET} on {share:.1%} (target {FAMILY_SHARE:.0%}); median {statistics.median(utils):.3f} "
        f"(target {FAMILY_MEDIAN}); min {utils[0]:.3f}; preemptions over 1 % of pages on "
        f"{sum(r['preemptions'] > 0.01 * r['pages'] for r in records)} engines (the yardstick "
        f"itself on {sum(r['yardstick_preemptions'] > 0.01 * r['pages'] for r in records)})",
        "five worst:",
    ]
    for r in worst:
        lines.append(f"  {r['utilization']:.3f} {r['parameters']}; yardstick {r['yardstick']}; "
                     f"{r['held_back']}")
    return "\n".join(lines)


def seeds_table(by_seed: Mapping[int, Sequence[dict[str, Any]]]) -> str:
    """One row per seed of the family: no seed is special (the gate was tuned on seed 0)."""
    lines = [f"| seed | engines | >= {TARGET} | median | lowest | crashes | engines over 1 % preemptions |",
             "|---|---|---|---|---|---|---|"]
    for seed, records in by_seed.items():
        utils = sorted(r["utilization"] for r in records)
        share = sum(u >= TARGET for u in utils) / len(utils)
        lines.append(
            f"| {seed} | {len(utils)} | {share:.1%} | {statistics.median(utils):.3f} | "
            f"{utils[0]:.3f} | {sum(r['crashes'] for r in records)} | "
            f"{sum(r['preemptions'] > 0.01 * r['pages'] for r in records)} |")
    return "\n".join(lines)


def plot_engine(records: Sequence[dict[str, Any]], path: Path) -> None:
    from bench.plot import plot_runs

    runs = [r for r in records if r["strategy"] != SWEEP]
    plot_runs(runs, path, title=f"{runs[0]['engine']}: {runs[0]['pages']} pages, seed {runs[0]['seed']}, virtual time")


# ------------------------------------------------------------------ command line


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.admission", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--profiles", default=",".join(NAMED_PAGES),
                        help="comma-separated named profiles (default: all)")
    parser.add_argument("--strategies", default=",".join(ALL_STRATEGIES),
                        help="comma-separated subset of: " + ", ".join(ALL_STRATEGIES))
    parser.add_argument("--seed", type=int, default=0, help="the server's seed (page lengths) and the family's")
    parser.add_argument("--family", type=int, default=0, metavar="N",
                        help="run the gate on N engines of the random family instead")
    parser.add_argument("--seeds", default=None, metavar="S,S,...",
                        help="with --family: judge the family of each seed, and print them side by side")
    parser.add_argument("--jobs", type=int, default=1, help="processes for --family")
    parser.add_argument("--json", type=Path, default=None, help="write one record per engine and strategy")
    parser.add_argument("--plot", type=Path, default=None, metavar="DIR",
                        help="write one PNG of traces per named profile into DIR")
    args = parser.parse_args(argv)
    for name in args.strategies.split(","):
        if name not in ALL_STRATEGIES:
            parser.error(f"unknown strategy {name!r}; known: {', '.join(ALL_STRATEGIES)}")
    for name in args.profiles.split(","):
        if name not in NAMED_PAGES:
            parser.error(f"unknown profile {name!r}; known: {', '.join(NAMED_PAGES)}")
    return args


def run_named(args: argparse.Namespace, log: Callable[[str], None]) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for name in args.profiles.split(","):
        started = time.perf_counter()
        rows = judge(name, *engine_of(name, args.seed), args.strategies.split(","))
        log(f"{name}: {NAMED_PAGES[name]} pages, {time.perf_counter() - started:.1f} s wall")
        if args.plot is not None:
            args.plot.mkdir(parents=True, exist_ok=True)
            plot_engine(rows, args.plot / f"{name}.png")
        records += rows
    return records


def run_family(args: argparse.Namespace, log: Callable[[str], None],
               seeds: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """The family's records, seed by seed (`seeds`, else `--seed`), each engine once."""
    jobs = [(seed, i) for seed in (seeds or [args.seed]) for i in range(args.family)]
    records: list[dict[str, Any]] = []

    def keep(record: dict[str, Any]) -> None:
        records.append(record)
        log(f"  {record['engine']}: {record['utilization']:.3f} ({record['wall_s']:.1f} s)"
            f"{' CRASHED' * record['crashes']}")

    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            for future in [pool.submit(judge_family_engine, seed, i) for seed, i in jobs]:
                keep(future.result())
    else:
        for seed, i in jobs:
            keep(judge_family_engine(seed, i))
    return records


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    log = lambda line: print(line, flush=True)  # noqa: E731
    if args.family and args.seeds:
        seeds = [int(s) for s in args.seeds.split(",")]
        records = run_family(args, log, seeds)
        by_seed = {seed: [r for r in records if r["seed"] == seed] for seed in seeds}
        for seed, rows in by_seed.items():
            print(family_summary(rows, seed))
        print(seeds_table(by_seed))
    elif args.family:
        records = run_family(args, log)
        print(family_summary(records, args.seed))
    else:
        records = run_named(args, log)
        print(named_table(records))
    print(f"wall time: {time.perf_counter() - started:.1f} s")
    if args.json is not None:
        slim = [{k: v for k, v in r.items() if k != "trace"} for r in records]
        args.json.write_text(json.dumps({"command": "python -m bench.admission " + " ".join(sys.argv[1:]),
                                         "records": slim}, indent=1))


if __name__ == "__main__":
    main()
