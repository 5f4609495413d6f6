"""The temporary Prefect server of a run with no PREFECT_API_URL, started without its code.

Left to itself, Prefect starts that server (a uvicorn subprocess) from the run's own
process, and to do so imports the whole server there: FastAPI, SQLAlchemy, asyncpg,
every API route and ORM model, about 75 MB of the run's resident memory for code the run
never calls. This starts the same subprocess, with the same command and environment
(prefect/server/api/server.py, `SubprocessASGIServer`), from here, and points this
process's Prefect settings at it; the server is stopped when the run ends, as Prefect
stops its own. With PREFECT_API_URL set, or ephemeral mode off, it does nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from pagegate.cli.stopping import STOPPER

log = logging.getLogger("pagegate.cli")

_ADDRESS_IN_USE = 3  # uvicorn's exit status when the port was taken meanwhile


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(port: int) -> subprocess.Popen[bytes]:
    import prefect
    from prefect.settings import get_current_settings

    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
           "PREFECT__SERVER_FINAL": "1",
           **get_current_settings().to_environment_variables(exclude_unset=True)}
    return subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--app-dir", str(Path(prefect.__file__).parent.parent),
         "--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "error", "--lifespan", "on"],
        env=env,
        # Its own session: a terminal's Ctrl-C reaches the whole foreground group, and
        # this server must outlive it long enough to take the run's last states and logs.
        # The run stops it (below); pagegate.cli.stopping reaps it whatever happens.
        start_new_session=True,
    )


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, timeout: float) -> bool:
    """True once /health answers 200; False when the process exited first."""
    deadline = time.monotonic() + timeout
    with httpx.Client() as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{url}/api/health").status_code == 200:
                    return True
            time.sleep(0.1)
    raise RuntimeError(f"the temporary Prefect server did not answer on {url} within {timeout:g} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def temporary_prefect_server() -> Iterator[str | None]:
    """Within it, Prefect talks to a temporary server started here (its API URL), or to
    the one PREFECT_API_URL names (None)."""
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_SERVER_EPHEMERAL_ENABLED,
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
        temporary_settings,
    )

    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        yield None
        return
    # Prefect's own wait counts only its sleeps, so it lasts well past its setting (20 s)
    # on a loaded machine; this one counts the clock, with room for a busy 2-core box.
    timeout = max(float(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()), 60.0)
    for _ in range(3):
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        log.info("Starting temporary Prefect server on %s", url)
        proc = _start(port)
        try:
            if _wait_healthy(proc, url, timeout):
                break
        except BaseException:
            _stop(proc)
            raise
        if proc.returncode != _ADDRESS_IN_USE:
            raise RuntimeError(f"the temporary Prefect server exited with status {proc.returncode}")
    else:
        raise RuntimeError("the temporary Prefect server found no free port")
    try:
        with temporary_settings(updates={PREFECT_API_URL: f"{url}/api"}):
            yield f"{url}/api"
    finally:
        with STOPPER.shielded():  # a signal now would leave the server running
            _drain_prefect_clients()
            log.info("Stopping temporary Prefect server on %s", url)
            _stop(proc)


def _drain_prefect_clients() -> None:
    """Send the run's last logs and events while the server still answers (Prefect
    would otherwise retry them against a stopped server at exit)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for service in (APILogWorker, EventsWorker):
        with contextlib.suppress(Exception):
            service.drain_all(timeout=10)
