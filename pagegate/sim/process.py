"""Run the simulator as a child process (for the demo, tests and benchmarks)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from types import TracebackType
from typing import IO

import httpx


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SimProcess:
    """`python -m pagegate.sim` on a free port; ready when /health answers 200."""

    def __init__(
        self,
        *,
        profile: str = "ci",
        port: int | None = None,
        extra_args: tuple[str, ...] = (),
        startup_timeout: float = 60.0,
    ) -> None:
        self.port = port or free_port()
        self.root_url = f"http://127.0.0.1:{self.port}"
        self.base_url = f"{self.root_url}/v1"
        self.metrics_url = f"{self.root_url}/metrics"
        self._args = [
            sys.executable, "-m", "pagegate.sim",
            "--host", "127.0.0.1", "--port", str(self.port), "--profile", profile, *extra_args,
        ]
        self._startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> SimProcess:
        # stderr goes to a file, never a pipe: a full pipe would block the server.
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the process)
        self.process = subprocess.Popen(self._args, stdout=subprocess.DEVNULL, stderr=self._log)
        deadline = time.monotonic() + self._startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"simulator exited at startup: {self.log_tail()}")
            try:
                if httpx.get(f"{self.root_url}/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"simulator not ready within {self._startup_timeout}s")

    def log_tail(self, limit: int = 2000) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-limit:]

    def stop(self) -> None:
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> SimProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
