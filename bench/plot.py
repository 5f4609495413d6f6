"""Plot the benchmark's traces: one panel per strategy, simulated time on a shared axis.

Each panel shows the server's waiting queue and running batch (from /metrics) and the
client's own in-flight count; the gate's panel adds its concurrency limit C, the olmOCR
panels mark when a worker started a group. A crash is a red vertical line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use("Agg"): the backend must be chosen first


def _column(trace: Mapping[str, Any], name: str) -> list[Any]:
    index = list(trace["columns"]).index(name)
    return [row[index] for row in trace["rows"]]


def plot_runs(
    runs: Sequence[Mapping[str, Any]],
    path: Path,
    *,
    title: str,
    crash_waiting: int | None = None,
) -> None:
    """Write a PNG with one panel per run (in the order given)."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 2.4 * len(runs)), sharex=True, squeeze=False)
    for ax, run in zip(axes[:, 0], runs, strict=True):
        server, client = run["trace"]["server"], run["trace"]["client"]
        ts, tc = _column(server, "t"), _column(client, "t")
        ax.plot(ts, _column(server, "waiting"), color="tab:red", lw=1.2, label="server waiting")
        ax.plot(ts, _column(server, "running"), color="tab:blue", lw=1.0, label="server running")
        ax.plot(tc, _column(client, "in_flight"), color="black", lw=0.9, ls="--", label="client in flight")
        if run["strategy"] == "pagegate":
            ax.plot(tc, _column(client, "limit"), color="tab:green", lw=0.9, label="gate limit C")
        for event in run.get("events", []):
            if str(event.get("kind", "")) == "group_start":
                ax.axvline(event["at"], color="tab:purple", lw=0.6, alpha=0.6)
        if crash_waiting:
            ax.axhline(crash_waiting, color="tab:red", lw=0.6, ls=":", alpha=0.7)
        if run.get("crashed"):
            ax.axvline(run["crash_at_s"], color="red", lw=2.0)
            ax.text(run["crash_at_s"], ax.get_ylim()[1] * 0.9, "  crash", color="red", va="top")
        util = run.get("utilization")
        label = f"{run['strategy']}: {run['pages_done']}/{run['pages']} pages, {run['pages_per_s']:.2f} p/s"
        if util is not None:
            label += f", utilization {util:.0%}"
        if run.get("crashed"):
            label += ", CRASHED"
        ax.set_title(label, fontsize=9, loc="left")
        ax.set_ylabel("requests", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7, loc="upper right", ncol=4)
    axes[-1, 0].set_xlabel("simulated seconds")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
