"""SIGINT and SIGTERM at every moment of a real `pagegate run` (pagegate.cli.stopping).

Each run has no PREFECT_API_URL, so it starts its own temporary Prefect server, as a
user's first run does. A moment is found by watching the run, never by a clock:

- server start: the temporary server's uvicorn process exists (it answers ~2 s later);
- planning: a counting worker (a render worker started with `--max-pixels 1`) exists;
- mid-run: three documents are committed, on a one-slot server that takes tens of
  seconds for the rest;
- summary: the run's stdout is a pipe nobody reads until the signal, and its JSON
  summary (300 ledger rows) is larger than the pipe, so the run is held in its summary.

Every case checks the exit code, pagegate's interrupt line, that no process the run
started is left (every process carries a marker in its environment), and that a rerun
of the same command finishes with every PDF done once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import psutil
import pytest

from pagegate import samples
from tests.fixtures.sim import SimServer, launch_sim
from tests.helpers import REPO, read_ledger, read_results

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

MARK = "PAGEGATE_TEST_STOP"
PDFS = 30
JUNK = 300  # not-a-PDF files: 300 ledger rows of JSON summary, well past a 64 KiB pipe


@pytest.fixture(scope="module")
def fast_sim() -> Iterator[SimServer]:
    server = launch_sim(profile="ci")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[SimServer]:
    server = launch_sim(profile="ci", max_num_seqs=1)  # one page at a time: a long run
    yield server
    server.stop()


def corpus(root: Path, *, junk: int = 0) -> Path:
    src = root / "in"
    src.mkdir()
    for i in range(PDFS):
        (src / f"d{i:02d}.pdf").write_bytes(samples.text_pdf(1, title=f"D{i}", seed=i))
    for i in range(junk):
        (src / f"junk-{i:03d}-{'x' * 80}.pdf").write_bytes(b"<html>not a pdf</html>")
    return src


def marked(mark: str) -> list[psutil.Process]:
    """Every live process that carries this run's marker, wherever it was reparented."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARK) == mark and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def start_run(src: Path, ws: Path, sim: SimServer, mark: str, *extra: str,
              stdout: int | IO[Any] = subprocess.PIPE) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env[MARK] = mark
    # stderr (the live display, Prefect's log) goes to a file: a pipe that fills while
    # nobody reads it would hold the run at a moment of its own choosing.
    with (ws.parent / f"stderr-{mark}.txt").open("wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "pagegate.cli", "run", str(src), "--workspace", str(ws),
             "--server", sim.base_url, "--pages-per-group", "5", *extra],
            cwd=REPO, env=env, stdout=stdout, stderr=err, start_new_session=True,
        )


def wait_for(proc: subprocess.Popen[bytes], moment: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 180
    while not moment():
        assert proc.poll() is None, "the run ended before the moment came"
        assert time.monotonic() < deadline, "the moment never came"
        time.sleep(0.01)  # polling the run's processes and workspace


def has_child(proc: subprocess.Popen[bytes], *words: str) -> Callable[[], bool]:
    def seen() -> bool:
        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            return False
        for child in children:
            try:
                line = child.cmdline()
            except psutil.Error:
                continue
            if all(w in line for w in words):
                return True
        return False

    return seen


def committed(ws: Path, count: int) -> Callable[[], bool]:
    return lambda: len(list((ws / "results").glob("*.jsonl"))) >= count


def server_stopped(proc: subprocess.Popen[bytes], ws: Path) -> Callable[[], bool]:
    """Every PDF done and the temporary server gone: the run is in its summary."""
    server = has_child(proc, "prefect.server.api.server:create_app")
    return lambda: len(read_ledger(ws)) == JUNK and committed(ws, PDFS)() and not server()


def send(proc: subprocess.Popen[bytes], signum: int) -> None:
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signum)  # Ctrl-C: the terminal signals the whole group
    else:
        proc.send_signal(signum)  # a scheduler or kill: the process alone


def finish(proc: subprocess.Popen[bytes], ws: Path, mark: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the run that start_run(..., ws, ..., mark) began."""
    out, _ = proc.communicate(timeout=120)
    err = (ws.parent / f"stderr-{mark}.txt").read_text()
    return proc.returncode, out.decode() if out else "", err


def left_after(mark: str) -> list[str]:
    """Processes with the marker a moment after the run exited (a reaped child's exit
    can lag its parent's by a scheduling slice); they are killed, and named."""
    deadline = time.monotonic() + 5
    while (left := marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.1)  # polling the process table
    names = []
    for proc in left:
        try:
            names.append(" ".join(proc.cmdline())[:120])
            proc.kill()
        except psutil.Error:
            continue
    return names


def interrupt_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("interrupted by ")]


def check_rerun(src: Path, ws: Path, sim: SimServer, *, junk: int = 0) -> None:
    mark = uuid.uuid4().hex
    code, _out, err = finish(start_run(src, ws, sim, mark), ws, mark)
    assert code == (1 if junk else 0), err[-2000:]
    docs = read_results(ws)
    assert sorted(Path(s).name for s in docs) == [f"d{i:02d}.pdf" for i in range(PDFS)]
    assert len({d["id"] for d in docs.values()}) == PDFS
    assert left_after(mark) == []


MOMENTS = ["server start", "planning", "mid-run", "summary"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("moment", MOMENTS)
def test_a_signal_at_any_moment(
    moment: str, signum: int, fast_sim: SimServer, slow_sim: SimServer, tmp_path: Path
) -> None:
    junk = JUNK if moment == "summary" else 0
    src = corpus(tmp_path, junk=junk)
    ws = tmp_path / "ws"
    mark = uuid.uuid4().hex
    if moment == "summary":
        proc = start_run(src, ws, fast_sim, mark, "--json")
        wait_for(proc, server_stopped(proc, ws))
    else:
        sim = slow_sim if moment == "mid-run" else fast_sim
        proc = start_run(src, ws, sim, mark)
        wait_for(proc, {
            "server start": has_child(proc, "prefect.server.api.server:create_app"),
            "planning": has_child(proc, "pagegate.pdf.worker", "--max-pixels", "1"),
            "mid-run": committed(ws, 3),
        }[moment])
    send(proc, signum)
    code, out, err = finish(proc, ws, mark)
    done = len(read_results(ws))
    print(f"{moment}, {signal.Signals(signum).name}: exit {code}, {done} committed")
    assert code == 128 + signum, err[-2000:]
    name = signal.Signals(signum).name
    assert interrupt_lines(err) == [
        f"interrupted by {name}: {done} PDFs committed; rerun the same command to continue"
    ], err[-2000:]
    assert "Traceback" not in err, err
    if moment in ("server start", "planning"):
        assert done == 0
    elif moment == "mid-run":
        assert 3 <= done < PDFS
        assert out.startswith(f"PDFs ok: {done}  failed: 0  ")
    else:
        assert done == PDFS and read_ledger(ws).keys() == {
            str(p) for p in src.glob("junk-*")}
    assert left_after(mark) == []
    check_rerun(src, ws, fast_sim, junk=junk)


def test_a_second_ctrl_c_stops_at_once(slow_sim: SimServer, fast_sim: SimServer,
                                       tmp_path: Path) -> None:
    src = corpus(tmp_path)
    ws = tmp_path / "ws"
    mark = uuid.uuid4().hex
    proc = start_run(src, ws, slow_sim, mark)
    wait_for(proc, committed(ws, 3))
    # A user pressing Ctrl-C until it stops. Signals that arrive before the first is
    # handled merge into one, so presses go on until the process has gone; the first
    # one's wind-down takes seconds, so the second comes well within it.
    while proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.2)
    code, _out, err = finish(proc, ws, mark)
    assert code == 130, err[-2000:]
    assert ("second SIGINT: stopping at once; committed documents are whole, pages in "
            "flight are dropped; rerun the same command to continue") in err.splitlines()
    assert left_after(mark) == []
    for path in (ws / "results").glob("*.jsonl"):  # whole, each of them
        assert json.loads(path.read_text())["text"]
    check_rerun(src, ws, fast_sim)
