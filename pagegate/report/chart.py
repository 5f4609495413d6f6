"""A PNG chart of one run: the server's queue, pages in flight and gate releases over time.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, so no global figure
state and no display needed); matplotlib is imported on first use because it costs
about a second. Input is the run's Timeline samples; output is PNG bytes for the
workspace Store, so the same code serves local and S3 workspaces.

A run draws its chart in a child process (`draw_run_chart`): matplotlib and the figure
cost about 50 MB, which would otherwise be the run process's peak, at its very end.
"""

from __future__ import annotations

import asyncio
import io
import pickle
import sys
from collections.abc import Sequence

from pagegate.report.progress import ProgressSample

MAX_RELEASE_MARKS = 300  # beyond this, one mark per release is clutter; the step line stays


def release_times(samples: Sequence[ProgressSample]) -> list[float]:
    """Times (s since start) at which the gate's release count went up, one per release.

    Several releases between two samples are all placed at the later sample.
    """
    times: list[float] = []
    previous = 0
    for s in samples:
        if s.releases is None:
            continue
        times.extend([s.elapsed] * max(0, s.releases - previous))
        previous = max(previous, s.releases)
    return times


def render_run_chart(samples: Sequence[ProgressSample], *, title: str = "pagegate run") -> bytes:
    """PNG bytes: top, server waiting and pages in flight; bottom, pages done and releases."""
    samples = tuple(samples)  # every series below must come from the same samples
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    t = [s.elapsed for s in samples]
    fig = Figure(figsize=(10, 6.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))

    top.plot(t, [s.in_flight for s in samples], color="tab:blue", label="pages in flight")
    waiting = [float("nan") if s.server_waiting is None else s.server_waiting for s in samples]
    top.plot(t, waiting, color="tab:red", label="server waiting queue")
    releases = release_times(samples)
    for i, at in enumerate(releases[:MAX_RELEASE_MARKS]):
        top.axvline(at, color="tab:green", alpha=0.35, linewidth=0.8,
                    label="gate release" if i == 0 else None)
    top.set_ylabel("requests")
    top.set_title(title)
    top.grid(alpha=0.3)
    handles = top.get_lines()
    if any(s.gate_queued is not None for s in samples):
        # The backlog at the gate is pages, often hundreds: its own axis, so it does not
        # flatten the server's queue and the pages in flight.
        backlog = top.twinx()
        queued = [float("nan") if s.gate_queued is None else s.gate_queued for s in samples]
        backlog.plot(t, queued, color="tab:gray", alpha=0.7, linewidth=1, linestyle="--",
                     label="pages waiting at the gate (right axis)")
        backlog.set_ylabel("pages waiting at the gate")
        handles = handles + backlog.get_lines()
    handles = [h for h in handles if not str(h.get_label()).startswith("_")]  # unlabelled marks
    top.legend(handles, [str(h.get_label()) for h in handles], loc="upper right",
               fontsize="small")

    bottom.plot(t, [s.pages_done for s in samples], color="tab:blue", label="pages OCR'd")
    bottom.set_ylabel("pages OCR'd")
    bottom.set_xlabel("seconds since start")
    bottom.grid(alpha=0.3)
    if any(s.releases is not None for s in samples):
        twin = bottom.twinx()
        twin.step(t, [s.releases or 0 for s in samples], where="post", color="tab:green",
                  label="gate releases")
        twin.set_ylabel("gate releases")
        lines = bottom.get_lines() + twin.get_lines()
        bottom.legend(lines, [str(line.get_label()) for line in lines], loc="upper left",
                      fontsize="small")
    else:
        bottom.legend(loc="upper left", fontsize="small")

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


async def draw_run_chart(samples: Sequence[ProgressSample], *, title: str) -> bytes:
    """`render_run_chart` in a child process (`python -m pagegate.report.chart`)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pagegate.report.chart", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    png, err = await proc.communicate(pickle.dumps((tuple(samples), title)))
    if proc.returncode != 0:
        raise RuntimeError(f"the chart process failed: {err.decode(errors='replace')[-500:]}")
    return png


def main() -> int:
    """Samples and title, pickled by `draw_run_chart`, on stdin; the PNG on stdout."""
    samples, title = pickle.load(sys.stdin.buffer)
    sys.stdout.buffer.write(render_run_chart(samples, title=title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
