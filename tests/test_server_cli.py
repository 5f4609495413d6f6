"""`pagegate run --model MODEL` without --server: the run launches its server and stops it."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from pagegate.sim.process import free_port
from tests.helpers import REPO, audit, cli_env, write_corpus

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]


def test_cli_launches_supervises_and_stops_the_server(tmp_path: Path) -> None:
    pdfs = write_corpus(tmp_path / "in", 2, 2)
    ws = tmp_path / "ws"
    port = free_port()
    done = subprocess.run(
        [sys.executable, "-m", "pagegate.cli", "run", str(tmp_path / "in"), "--workspace", str(ws),
         "--model", "allenai/olmOCR-2-7B-1025-FP8",
         "--vllm-command", f"{sys.executable} -m pagegate.sim --profile ci",
         "--vllm-port", str(port), "--served-model-name", "ocr-under-test",
         "--limit-mm-per-prompt", "", "--max-num-seqs", "4", "--hang-after", "120"],
        cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = audit(ws)
    assert result.sources == set(pdfs) and result.ledger == 0 and result.fallback_pages == 0
    # The server's own output reached the run log through the pagegate.vllm logger.
    assert "pagegate.vllm - pagegate sim: serving ci" in done.stderr
    assert "pagegate.server - warm-up request answered" in done.stderr
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)


def test_cli_refuses_launch_settings_with_an_external_server(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pagegate.cli", "run", str(tmp_path), "--workspace", str(tmp_path),
         "--server", "http://127.0.0.1:1/v1", "--max-num-seqs", "8"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2 and "drop --server" in done.stderr


def readme_simulator_command() -> list[str]:
    """The one `pagegate run ... --vllm-command ...` line README.md prints, as argv."""
    lines = [line for line in (REPO / "README.md").read_text().splitlines()
             if line.startswith("pagegate run ") and "--vllm-command" in line]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])


def test_readme_simulator_command_works_as_printed(tmp_path: Path) -> None:
    # As printed: `python` and `pagegate` from the PATH (this venv first), ./pdfs here, the
    # server on the launcher's default port, every launcher flag handed to the simulator.
    argv = readme_simulator_command()
    write_corpus(tmp_path / "pdfs", 2, 2)
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 8000)) == 0:
            pytest.fail("port 8000, the README's (the launcher's default), is taken")
    env = cli_env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    result = audit(tmp_path / "ocr-out")
    assert len(result.sources) == 2 and result.ledger == 0 and result.fallback_pages == 0
    assert "ignoring vLLM options it does not model: --limit-mm-per-prompt" in done.stderr
    assert "queue cap: --max-num-queued-reqs 512" in done.stderr
