"""Which parts of the gate earn their place: each one switched off in turn, in virtual time.

    python -m bench.ablation --jobs 2                          # every part
    python -m bench.ablation --parts token-bucket,ack-clock --family 200 --jobs 2

For each part (PARTS) the gate runs with that part switched off, everything else as
shipped, on the named profiles, the first N engines of the random family and every fault
schedule (tests/test_sim_faults.py, run by pytest in a child process). A part is switched
off by the tuning or config value that disables it, or, where none does, by replacing
the one policy function that is the part with its neutral form (`Part.patches`); the
bench applies that in its own processes only, never in what a user runs.

The row "(nothing off)" is the gate as shipped; every other row is compared with it
engine by engine. A part earns its place if switching it off moves some engine's
utilization by more than `MOVE_POINTS` points, adds a crash or preemptions, or breaks a
fault test (issue 31). Yardsticks do not depend on the gate, so they are computed once
and kept in a cache file keyed by the simulator's source (`--yardsticks`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import importlib
import json
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.admission import BUDGET_FACTOR, TARGET, engine_of, utilization_at
from pagegate.admission.policy import GateConfig, GateTuning
from pagegate.sim.engines import NAMED_PAGES
from pagegate.sim.strategies import gate
from pagegate.sim.virtual import run_virtual
from pagegate.sim.yardstick import page_costs, yardstick

REPO = Path(__file__).resolve().parents[1]
MOVE_POINTS = 0.5
"""Issue 31: a part stays only if switching it off moves a figure by more than this."""
POLICY = "pagegate.admission.policy"


# ------------------------------------------------------------------ the parts


@dataclass(frozen=True)
class Part:
    """One part of the controller and how to switch it off."""

    name: str
    what: str
    tuning: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    patches: tuple[tuple[str, Callable[[Any], Any]], ...] = ()
    """(target, build): the target becomes build(original); a target is "module:name", the name
    a function or a class's method ("module:Class.method")."""


def located(target: str) -> tuple[Any, str]:
    """The object that holds `target` ("module:name" or "module:Class.method"), and the name."""
    module_name, _, path = target.partition(":")
    *outer, attribute = path.split(".")
    return functools.reduce(getattr, outer, importlib.import_module(module_name)), attribute


def _returns(value: Any) -> Callable[[Any], Any]:
    return lambda _original: (lambda *_a, **_k: value)


def _first_arg(_original: Any) -> Any:
    return lambda first, *_a, **_k: first


def _no_preemption_cut(original: Any) -> Any:
    def steer(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **{**kwargs, "preempted": False})
    return steer


def _acked_always(original: Any) -> Any:
    def update(concurrency: Any, *args: Any, **kwargs: Any) -> Any:
        return original(dataclasses.replace(concurrency, acked=max(concurrency.acked, int(BIG))),
                        *args, **kwargs)
    return update


def _band_floor(_original: Any) -> Any:
    def band(state: Any, config: GateConfig) -> float:
        return float(config.tuning.waiting_band_min)
    return band


def _fixed_units(_original: Any) -> Any:
    def size(state: Any, config: GateConfig) -> int:
        return int(config.unit_pages)
    return size


def _window_pace(original: Any) -> Any:
    def pace(rates: Any, config: GateConfig) -> Any:
        return original(dataclasses.replace(rates, recent=type(rates.recent)()), config)
    return pace


def _no_ack_clock(original: Any) -> Any:
    def pause_reason(state: Any, now: float, config: GateConfig) -> Any:
        return original(dataclasses.replace(state, finished_at=None), now, config)
    return pause_reason


def _newest_latency(_original: Any) -> Any:
    def latency(front: Any) -> float | None:
        if front.held.den <= 0.0 or not front.latencies:
            return None
        return float(front.latencies[-1][1])
    return latency


def _whole_gap(_original: Any) -> Any:
    return lambda front, gap_now, rate: gap_now


BIG = 1e9

PARTS: tuple[Part, ...] = (
    Part("(nothing off)", "the gate as shipped"),
    # units: their size
    Part("unit-drain", "every unit is unit_pages, never two cooldowns of the drain",
         patches=((f"{POLICY}._step:GateState.unit_size", _fixed_units),)),
    # pages: the token bucket
    Part("token-bucket", "no pacing: pages go as soon as C allows",
         tuning={"pace_min_rate": BIG, "pace_gain": BIG}),
    Part("pace-recent", "the bucket follows the window's drain only",
         patches=((f"{POLICY}._signals:Rates.pace", _window_pace),)),
    # the front end
    Part("frontend", "the front end is no signal (no excess, no transit)",
         patches=((f"{POLICY}._signals:FrontEnd.excess", _returns(0)),
                  (f"{POLICY}._signals:FrontEnd.transit", _returns(0.0)))),
    Part("frontend-allowance", "the whole front-end gap counts as queue",
         patches=((f"{POLICY}._signals:FrontEnd.excess", _whole_gap),)),
    Part("frontend-min-filter", "the stage latency is the newest, not the window's lowest",
         patches=((f"{POLICY}._signals:FrontEnd.stage_latency", _newest_latency),)),
    # readings
    Part("ack-clock", "a stale reading pauses dispatch even while pages finish",
         patches=((f"{POLICY}._step:GateState.pause_reason", _no_ack_clock),)),
    Part("stall-detection", "a calm engine that generates nothing is not 'stalled'",
         patches=((f"{POLICY}._signals:Signals.stalled", _returns(False)),)),
    # C
    Part("kv-start", "C does not start at the full-context requests the cache holds",
         patches=((f"{POLICY}._limit:Concurrency._first_estimate", _first_arg),)),
    Part("kv-room-bound", "slow start doubles C, never bounded by the KV room",
         patches=((f"{POLICY}._limit:_kv_room", _returns(None)),)),
    Part("taking-in", "a queue above the band is cut even while the engine takes it in",
         patches=((f"{POLICY}._limit:Concurrency._taking_in", _returns(False)),)),
    Part("ack-growth", "C grows below the band without a page back since the last reading",
         patches=((f"{POLICY}._limit:Concurrency.update", _acked_always),)),
    Part("additive-share", "after slow start C grows by one page a reading, not 5 %",
         tuning={"additive_growth_fraction": 0.0}),
    Part("band-floor", "the band has no floor of 2",
         tuning={"waiting_band_min": 0.0}),
    Part("band-refill", "the band is its floor only (no refill term)",
         patches=((f"{POLICY}._step:GateState.waiting_band", _band_floor),)),
    Part("excess-share", "a queue cut takes the whole excess, not half",
         tuning={"excess_cut_share": 1.0}),
    Part("preemption-backoff", "a preemption does not cut C",
         patches=((f"{POLICY}._limit:Concurrency.update", _no_preemption_cut),)),
    Part("latency-limit", "no page latency limit",
         config={"page_latency_limit_seconds": None}),
)
PART_NAMES = {p.name: p for p in PARTS}
BASE = PARTS[0].name


@contextlib.contextmanager
def switched_off(part: Part) -> Iterator[None]:
    """Apply `part`'s switches in this process; undo them on exit."""
    undo: list[Callable[[], None]] = []
    try:
        if part.tuning:
            new = GateTuning.__new__
            old = new.__defaults__
            defaults = GateTuning._field_defaults | part.tuning
            new.__defaults__ = tuple(defaults[name] for name in GateTuning._fields)
            undo.append(lambda: setattr(new, "__defaults__", old))
        if part.config:
            init = GateConfig.__init__
            kw_old = dict(init.__kwdefaults__ or {})
            init.__kwdefaults__ = {**kw_old, **part.config}
            undo.append(lambda: setattr(init, "__kwdefaults__", kw_old))
        for target, build in part.patches:
            owner, attribute = located(target)
            original = getattr(owner, attribute)
            setattr(owner, attribute, build(original))
            undo.append(functools.partial(setattr, owner, attribute, original))
        yield
    finally:
        for step in reversed(undo):
            step()


# ------------------------------------------------------------------ engines and yardsticks


def sim_digest() -> str:
    """The source a yardstick rests on (the simulator, and the page path and prompts it
    prices pages with: all of pagegate but the gate): a cached yardstick is valid while it
    holds."""
    digest = hashlib.sha256()
    for path in sorted((REPO / "pagegate").rglob("*.py")):
        if "admission" not in path.relative_to(REPO / "pagegate").parts:
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def yardstick_rate(name: str, seed: int) -> float:
    profile, workload = engine_of(name, seed)
    return yardstick(profile, page_costs(workload, profile)).pages_per_s


def yardsticks(names: Sequence[str], seed: int, cache: Path, jobs: int,
               log: Callable[[str], None]) -> dict[str, float]:
    key = f"{sim_digest()}:{seed}"
    stored: dict[str, dict[str, float]] = json.loads(cache.read_text()) if cache.exists() else {}
    known = stored.get(key, {})
    missing = [n for n in names if n not in known]
    if missing:
        log(f"computing {len(missing)} yardsticks (cached in {cache})")
        with ProcessPoolExecutor(jobs) as pool:
            for name, rate in zip(missing, pool.map(yardstick_rate, missing, [seed] * len(missing)), strict=True):
                known[name] = rate
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({key: known}, indent=1))
    return {n: known[n] for n in names}


# ------------------------------------------------------------------ runs


def gate_run(part_name: str, name: str, seed: int, stick: float) -> dict[str, Any]:
    """The gate with one part off, on one engine: its figures."""
    with switched_off(PART_NAMES[part_name]):
        profile, workload = engine_of(name, seed)
        budget_s = BUDGET_FACTOR * workload.pages / stick
        started = time.perf_counter()
        run = run_virtual(profile, gate(GateConfig()), workload, strategy_name="pagegate",
                          budget_s=budget_s)
    return {"part": part_name, "engine": name, "pages": run.pages,
            "utilization": round(utilization_at(run, stick, budget_s), 4),
            "crashes": int(run.crashed), "preemptions": run.preemptions,
            "peak_waiting": run.peak_waiting, "wall_s": round(time.perf_counter() - started, 2)}


OUTCOME = re.compile(r"^(PASSED|FAILED|XFAIL|XPASS|ERROR) (tests/\S+)")
FIGURE = re.compile(r"^(\S+): \w+, .*")


def fault_run(part_name: str) -> dict[str, Any]:
    """tests/test_sim_faults.py with one part off, in a child process: outcomes and figures."""
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.ablation", "--fault-child", part_name],
        cwd=REPO, capture_output=True, text=True, timeout=3600,
    )
    outcomes: dict[str, str] = {}
    figures: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        if m := OUTCOME.match(line):
            test = m.group(2).split("::", 1)[1]
            outcomes[test] = "XPASS" if "XPASS" in line else m.group(1)
        elif (m := FIGURE.match(line)) and "pages in" in line:
            figures[m.group(1)] = line
    return {"part": part_name, "outcomes": outcomes, "figures": figures,
            "returncode": proc.returncode, "wall_s": round(time.perf_counter() - started, 1)}


FAULT_FIGURE = re.compile(r"(\d+) admitted during it; recovery (never|[\d.]+ s)")


def fault_figures(faults: dict[str, Any]) -> dict[str, str]:
    """Per fault schedule: pages admitted while it lasted and the recovery time after it."""
    found: dict[str, str] = {}
    for name, line in faults["figures"].items():
        end = line.split(":", 1)[1].split(",", 1)[0].strip()
        figure = "" if end == "finished" else f"{end}, "
        if m := FAULT_FIGURE.search(line):
            figure += f"{m.group(1)} in, {m.group(2)}"
        if figure:
            found[name] = figure.rstrip(", ")
    return found


def fault_child(part_name: str) -> int:
    import pytest

    with switched_off(PART_NAMES[part_name]):
        return int(pytest.main(["-q", "-s", "-rA", "-p", "no:cacheprovider", "-p", "no:randomly",
                                "tests/test_sim_faults.py"]))


# ------------------------------------------------------------------ report


def summarize(part: str, runs: Sequence[dict[str, Any]], base: dict[str, dict[str, Any]],
              faults: dict[str, Any] | None, base_faults: dict[str, Any] | None) -> dict[str, Any]:
    by_engine = {r["engine"]: r for r in runs}
    deltas = {e: 100 * (r["utilization"] - base[e]["utilization"]) for e, r in by_engine.items()}
    worst = min(deltas, key=deltas.__getitem__)
    best = max(deltas, key=deltas.__getitem__)
    family = [r for r in runs if r["engine"] not in NAMED_PAGES]
    named = [r for r in runs if r["engine"] in NAMED_PAGES]
    summary: dict[str, Any] = {
        "part": part,
        "what": PART_NAMES[part].what,
        "worst": (worst, round(deltas[worst], 2)),
        "best": (best, round(deltas[best], 2)),
        "moved": sum(abs(d) > MOVE_POINTS for d in deltas.values()),
        "named_min": min(r["utilization"] for r in named) if named else None,
        "crashes": sum(r["crashes"] for r in runs),
        "preemptions": sum(r["preemptions"] for r in runs),
        "over_1pct": sum(r["preemptions"] > 0.01 * r["pages"] for r in runs),
        "peak_waiting": max(r["peak_waiting"] for r in runs),
    }
    if family:
        utils = [r["utilization"] for r in family]
        summary |= {"family_share": sum(u >= TARGET for u in utils) / len(utils),
                    "family_median": statistics.median(utils), "family_min": min(utils)}
    if faults is not None and base_faults is not None:
        changed = {t: f"{base_faults['outcomes'].get(t, '?')}->{o}"
                   for t, o in faults["outcomes"].items()
                   if o != base_faults["outcomes"].get(t)}
        summary["faults_changed"] = changed
        mine, theirs = fault_figures(faults), fault_figures(base_faults)
        summary["faults_moved"] = {
            name: f"{theirs.get(name)} -> {figure}" for name, figure in mine.items()
            if figure != theirs.get(name)}
    return summary


def table(summaries: Sequence[dict[str, Any]]) -> str:
    lines = ["| part off | worst engine (points) | best engine (points) | engines moved > 0.5 | "
             "named min | family >= 0.97 | family median | crashes | preemptions (engines > 1 %) | "
             "peak waiting | fault tests changed | fault figures moved (admitted during, recovery) |",
             "|" + "---|" * 12]
    for s in summaries:
        faults = s.get("faults_changed")
        fault_text = "-" if faults is None else (
            "none" if not faults else "; ".join(f"{t} {c}" for t, c in sorted(faults.items())))
        moved = s.get("faults_moved")
        moved_text = "-" if moved is None else (
            "none" if not moved else "; ".join(f"{n}: {c}" for n, c in sorted(moved.items())))
        share = s.get("family_share")
        lines.append(
            f"| {s['part']} | {s['worst'][0]} {s['worst'][1]:+.1f} | {s['best'][0]} {s['best'][1]:+.1f} "
            f"| {s['moved']} | {s['named_min']:.3f} | "
            + ("-" if share is None else f"{share:.1%}") + " | "
            + ("-" if share is None else f"{s['family_median']:.3f}")
            + f" | {s['crashes']} | {s['preemptions']} ({s['over_1pct']}) | {s['peak_waiting']} "
            f"| {fault_text} | {moved_text} |")
    return "\n".join(lines)


# ------------------------------------------------------------------ command line


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.ablation",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--parts", default=",".join(p.name for p in PARTS[1:]),
                        help="comma-separated parts to switch off (default: all); "
                        "the gate as shipped always runs too")
    parser.add_argument("--family", type=int, default=40, metavar="N",
                        help="the first N engines of the random family (default 40)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--no-faults", action="store_true", help="skip the fault schedules")
    parser.add_argument("--yardsticks", type=Path,
                        default=Path.home() / ".cache" / "pagegate" / "yardsticks.json")
    parser.add_argument("--json", type=Path, default=None, help="write every run and summary")
    parser.add_argument("--fault-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in args.parts.split(","):
        if name not in PART_NAMES:
            parser.error(f"unknown part {name!r}; known: {', '.join(PART_NAMES)}")
    return args


def log(line: str) -> None:
    print(line, flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.fault_child is not None:
        sys.exit(fault_child(args.fault_child))
    started = time.perf_counter()
    parts = [BASE, *[p for p in args.parts.split(",") if p != BASE]]
    engines = [*NAMED_PAGES, *(f"family-{args.seed}-{i}" for i in range(args.family))]
    sticks = yardsticks(engines, args.seed, args.yardsticks, args.jobs, log)
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in parts}
    fault_results: dict[str, dict[str, Any]] = {}
    with ProcessPoolExecutor(args.jobs) as pool, ThreadPoolExecutor(1) as faults_pool:
        futures: list[tuple[str, Future[dict[str, Any]]]] = [
            (p, pool.submit(gate_run, p, e, args.seed, sticks[e])) for p in parts for e in engines]
        fault_futures: dict[str, Future[dict[str, Any]]] = {} if args.no_faults else {p: faults_pool.submit(fault_run, p) for p in parts}
        for part, future in futures:
            runs[part].append(future.result())
            if len(runs[part]) == len(engines):
                log(f"{part}: {len(engines)} engines done ({time.perf_counter() - started:.0f} s)")
        for part, ff in fault_futures.items():
            fault_results[part] = ff.result()
            log(f"{part}: faults done ({fault_results[part]['wall_s']} s)")
    base = {r["engine"]: r for r in runs[BASE]}
    summaries = [summarize(p, runs[p], base, fault_results.get(p), fault_results.get(BASE))
                 for p in parts]
    print(table(summaries))
    print(f"wall time: {time.perf_counter() - started:.1f} s")
    if args.json is not None:
        args.json.write_text(json.dumps({
            "command": "python -m bench.ablation " + " ".join(sys.argv[1:]),
            "summaries": summaries, "runs": runs, "faults": fault_results}, indent=1))


if __name__ == "__main__":
    main()
