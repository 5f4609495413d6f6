"""The launcher and the watchdog over real processes: the simulator stands in for vLLM.

`python -m pagegate.sim` is launched through `--vllm-command`-style settings (no model
argument; the simulator takes the same --host/--port/--served-model-name/--max-num-seqs
flags as `vllm serve`). Faults are real: kill -9 and SIGSTOP of the server process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from pagegate.clock import MonotonicClock
from pagegate.errors import ServerLaunchError
from pagegate.server.launcher import VllmLauncher, warmup_png
from pagegate.server.managed import open_managed_server
from pagegate.server.settings import VllmSettings
from pagegate.server.watchdog import Condition, WatchdogConfig, WatchLimits
from pagegate.sim.process import free_port
from pagegate.vlm.chat import build_chat_request
from pagegate.vlm.profiles import get_profile
from tests.helpers import metric_total

pytestmark = pytest.mark.slow

SIM_COMMAND = f"{sys.executable} -m pagegate.sim --profile ci"
RECOVERY_LIMIT_S = 60.0
"""How long a test waits for a recovery, which is recorded only once the new server is
ready and warmed up: detection + restart (ready_timeout_seconds=30) + warm-up, with room
for a loaded machine. A deadline for polling, not a speed target."""


def sim_settings(**overrides: object) -> VllmSettings:
    values: dict[str, object] = {
        "model": "allenai/olmOCR-2-7B-1025-FP8", "command": SIM_COMMAND, "port": free_port(),
        "served_model_name": "olmocr-test", "max_num_seqs": 8, "limit_mm_per_prompt": None,
    }
    return VllmSettings(**{**values, **overrides})  # type: ignore[arg-type]


def refuses_connections(url: str) -> bool:
    try:
        httpx.get(url, timeout=2)
    except httpx.ConnectError:
        return True
    return False


def test_launch_is_ready_and_warmed_up_then_stops(caplog: pytest.LogCaptureFixture) -> None:
    settings = sim_settings()

    async def scenario() -> tuple[float, list[str], int | None]:
        async with httpx.AsyncClient() as http:
            launcher = VllmLauncher(settings, http=http, ready_timeout_seconds=30)
            await launcher.start()
            try:
                models = (await http.get(f"{settings.base_url}/models")).json()
                warmups = metric_total(f"{settings.root_url}/metrics", "vllm:request_success_total")
            finally:
                await launcher.stop()
            return warmups, [m["id"] for m in models["data"]], launcher.returncode

    with caplog.at_level(logging.INFO, logger="pagegate.vllm"):
        warmups, models, code = asyncio.run(scenario())
    assert models == ["olmocr-test"], "the served model name reached the server"
    assert warmups == 1, "exactly one warm-up request before work starts"
    server_lines = [r.getMessage() for r in caplog.records if r.name == "pagegate.vllm"]
    assert any(line.startswith("pagegate sim: serving") for line in server_lines)
    assert code is not None, "stopped"
    assert refuses_connections(f"{settings.root_url}/health")


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (f"{sys.executable} -c \"print('no GPU found'); raise SystemExit(7)\"", "status 7"),
        ("/nonexistent/vllm serve {model}", "cannot run"),
        (f"{sys.executable} -c \"print('x' * 3_000_000); print('no GPU found'); exit(5)\"",
         "status 5"),
    ],
    ids=["exits-at-startup", "no-such-command", "line-longer-than-the-pipe-buffer"],
)
def test_a_server_that_cannot_start_is_reported(command: str, message: str) -> None:
    async def scenario() -> None:
        async with httpx.AsyncClient() as http:
            launcher = VllmLauncher(sim_settings(command=command), http=http,
                                    ready_timeout_seconds=30)
            await launcher.start()

    with pytest.raises(ServerLaunchError) as caught:
        asyncio.run(scenario())
    assert message in str(caught.value)
    if "status" in message:
        assert "no GPU found" in str(caught.value), "the server's last lines are in the error"


def test_supervisor_restarts_a_killed_and_a_frozen_server() -> None:
    settings = sim_settings()
    # unanswered_after tells a frozen server from a live one: 10 s, which a live simulator
    # never goes unanswered for however loaded the machine (a spurious restart would make
    # starts 4); SIGSTOP answers never.
    watchdog = WatchdogConfig(interval_seconds=0.2, probe_timeout_seconds=5.0,
                              limits=WatchLimits(hang_after=60.0, unanswered_after=10.0))

    async def wait_for(predicate: object, limit: float = RECOVERY_LIMIT_S) -> None:
        deadline = time.monotonic() + limit
        while not predicate():  # type: ignore[operator]
            assert time.monotonic() < deadline, "timed out"
            await asyncio.sleep(0.05)

    async def scenario() -> list[tuple[Condition, float, float]]:
        measured = []
        async with (
            httpx.AsyncClient() as http,
            open_managed_server(settings, http=http, clock=MonotonicClock(), watchdog=watchdog,
                                ready_timeout_seconds=30, stop_timeout_seconds=1.0) as server,
        ):
            for sig in (signal.SIGKILL, signal.SIGSTOP):
                pid = server.launcher.pid
                assert pid is not None
                seen = len(server.supervisor.recoveries)
                faulted_at = time.monotonic()
                os.kill(pid, sig)
                await wait_for(lambda n=seen: len(server.supervisor.recoveries) > n)
                recovery = server.supervisor.recoveries[-1]
                assert server.launcher.pid != pid, "a new process"
                health = await http.get(f"{settings.root_url}/health")
                assert health.status_code == 200
                measured.append((recovery.condition, recovery.detected_at - faulted_at,
                                 recovery.recovery_seconds))
            assert server.launcher.starts == 3
        return measured

    measured = asyncio.run(scenario())
    assert [c for c, _, _ in measured] == [Condition.DEAD, Condition.UNRESPONSIVE]
    assert refuses_connections(f"{settings.root_url}/health"), "stopped with the context"
    for condition, detection, recovery in measured:
        print(f"{condition}: detected {detection:.2f} s after the fault, server ready and "
              f"warmed up {recovery:.2f} s after detection")


# A stand-in for vLLM's hang (vLLM #39863): the API answers, /health says 200, requests
# wait, and the generated-token counter never moves.
HUNG_SERVER = '''
import argparse, json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
p = argparse.ArgumentParser()
p.add_argument("--host"); p.add_argument("--port", type=int); p.add_argument("--served-model-name")
a, _ = p.parse_known_args()
METRICS = ("vllm:num_requests_waiting 3\\nvllm:num_requests_running 0\\n"
           "vllm:kv_cache_usage_perc 0.5\\nvllm:generation_tokens_total 42\\n")
class H(BaseHTTPRequestHandler):
    def reply(self, body, kind="application/json"):
        data = body.encode()
        self.send_response(200); self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
    def do_GET(self):
        if self.path == "/v1/models":
            self.reply(json.dumps({"data": [{"id": a.served_model_name}]}))
        elif self.path == "/metrics":
            self.reply(METRICS, "text/plain")
        else:
            self.reply("")
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"])); self.reply("{}")
    def log_message(self, *args):
        pass
print("hung stand-in listening", flush=True)
ThreadingHTTPServer((a.host, a.port), H).serve_forever()
'''


def test_supervisor_restarts_a_hung_engine(tmp_path: Path) -> None:
    script = tmp_path / "hung_server.py"
    script.write_text(HUNG_SERVER)
    settings = sim_settings(command=f"{sys.executable} {script}")
    watchdog = WatchdogConfig(interval_seconds=0.2, limits=WatchLimits(hang_after=1.0))

    async def scenario() -> tuple[float, float, int]:
        async with (
            httpx.AsyncClient() as http,
            open_managed_server(settings, http=http, clock=MonotonicClock(), watchdog=watchdog,
                                ready_timeout_seconds=30, stop_timeout_seconds=1.0) as server,
        ):
            ready_at = time.monotonic()
            while not server.supervisor.recoveries:
                assert time.monotonic() < ready_at + RECOVERY_LIMIT_S, "the hang was never detected"
                await asyncio.sleep(0.05)
            [recovery] = server.supervisor.recoveries
            assert recovery.condition is Condition.HUNG
            return recovery.detected_at - ready_at, recovery.recovery_seconds, server.launcher.starts

    detection, recovery, starts = asyncio.run(scenario())
    assert starts == 2
    assert detection >= 1.0, "not before the counter was flat for hang_after"
    print(f"hung: detected {detection:.2f} s after the server was ready (hang_after 1 s), "
          f"back {recovery:.2f} s after detection")


def test_supervisor_restarts_the_simulator_when_its_engine_hangs() -> None:
    """The simulator's own hang (--hang-after-requests, SIGUSR1): API up, tokens flat."""
    settings = sim_settings(command=f"{SIM_COMMAND} --hang-after-requests 3")
    watchdog = WatchdogConfig(interval_seconds=0.2, limits=WatchLimits(hang_after=1.0))
    body = build_chat_request(get_profile("olmocr-2"), model="olmocr-test",
                              image_png=warmup_png(), temperature=0.0)
    body["max_tokens"] = 16
    chat = f"{settings.base_url}/chat/completions"

    async def stuck_request(http: httpx.AsyncClient) -> asyncio.Task[object]:
        task = asyncio.create_task(http.post(chat, json=body, timeout=30))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # outcome not needed
        return task

    async def scenario() -> list[tuple[str, float, float]]:
        measured = []
        async with (
            httpx.AsyncClient() as http,
            open_managed_server(settings, http=http, clock=MonotonicClock(), watchdog=watchdog,
                                ready_timeout_seconds=30, stop_timeout_seconds=1.0) as server,
        ):
            assert (await http.post(chat, json=body)).status_code == 200  # request 2 of 3
            for how in ("after 3 requests", "SIGUSR1"):
                seen = len(server.supervisor.recoveries)
                if how == "SIGUSR1":
                    assert server.launcher.pid is not None
                    os.kill(server.launcher.pid, signal.SIGUSR1)
                hung_at = time.monotonic()
                pending = await stuck_request(http)
                while len(server.supervisor.recoveries) == seen:
                    assert time.monotonic() < hung_at + RECOVERY_LIMIT_S, f"hang ({how}) never detected"
                    await asyncio.sleep(0.05)
                recovery = server.supervisor.recoveries[-1]
                assert recovery.condition is Condition.HUNG
                assert not pending.done() or pending.exception() is not None, "never answered"
                pending.cancel()
                measured.append((how, recovery.detected_at - hung_at, recovery.recovery_seconds))
            assert (await http.post(chat, json=body)).status_code == 200, "serving again"
        return measured

    for how, detection, recovery in asyncio.run(scenario()):
        assert detection >= 1.0, "not before the counter was flat for hang_after"
        print(f"sim hang ({how}): detected {detection:.2f} s after it hung (hang_after 1 s), "
              f"back {recovery:.2f} s after detection")
