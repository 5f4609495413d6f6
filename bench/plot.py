"""Plot the benchmark's traces: one panel per strategy, simulated time on a shared axis.

Each panel shows the server's waiting queue and running batch and the client's own
in-flight count; the gate's panel adds its concurrency limit C. A crash is a red line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use("Agg"): the backend must be chosen first


def plot_runs(runs: Sequence[Mapping[str, Any]], path: Path, *, title: str) -> None:
    """Write a PNG with one panel per run; each run's `trace` rows are
    (t, waiting, running, kv usage, client in flight, admission limit)."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 2.4 * len(runs)), sharex=True, squeeze=False)
    for ax, run in zip(axes[:, 0], runs, strict=True):
        rows = run["trace"]
        t = [row[0] for row in rows]
        ax.plot(t, [row[1] for row in rows], color="tab:red", lw=1.2, label="server waiting")
        ax.plot(t, [row[2] for row in rows], color="tab:blue", lw=1.0, label="server running")
        ax.plot(t, [row[4] for row in rows], color="black", lw=0.9, ls="--", label="client in flight")
        if run["strategy"] == "pagegate":
            ax.plot(t, [row[5] for row in rows], color="tab:green", lw=0.9, label="gate limit C")
        label = (f"{run['strategy']}: {run['pages_done']}/{run['pages']} pages, "
                 f"{run['pages_per_s']:.2f} p/s, utilization {run['utilization']:.0%}")
        if run.get("crashes"):
            label += ", CRASHED"
            ax.axvline(run["elapsed_s"], color="red", lw=2.0)
        ax.set_title(label, fontsize=9, loc="left")
        ax.set_ylabel("requests", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7, loc="upper right", ncol=4)
    axes[-1, 0].set_xlabel("virtual seconds")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
