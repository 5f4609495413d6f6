"""Which vLLM server a run talks to: the one named, the node's own, or one it launches.

From the command line's --server and --model:
- `--server URL`: an external server; --model is its served name (default "olmocr").
  Repeated (`--server A --server B`): several servers, one gate each, pages routed to the
  least-loaded one (flow parameter server_urls).
- no --server, `--model MODEL`: launch `vllm serve MODEL` (or --vllm-command) and
  supervise it; requests use its served name.
- neither: the default external server on 127.0.0.1:8000, served name "olmocr".

On a cluster every GPU node runs one Prefect worker next to its vLLM server, and the
shard runs the planner starts land on any node. The worker's environment names the
node's server (flow runs inherit it), so one `shard` deployment serves every node.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

SERVER_URL_ENV = "PAGEGATE_SERVER_URL"
DEFAULT_SERVER_URL = "http://127.0.0.1:8000/v1"  # vLLM's default port on this host
DEFAULT_SERVED_NAME = "olmocr"


def run_target_params(
    server: str | Sequence[str] | None, model: str | None, launch: Mapping[str, Any]
) -> dict[str, Any]:
    """Flow parameters (server_url, model, launch_server) for the run's server.

    `launch` holds the launch-only settings (launch_server names); unset ones are None
    and left out, so the launcher's defaults apply. Given with --server they are an
    error rather than silently ignored.
    """
    chosen = {k: v for k, v in launch.items() if v is not None and v != ()}
    servers = [server] if isinstance(server, str) else list(server or [])
    if len(set(servers)) < len(servers):
        raise ValueError("the same --server is given twice")
    if len(servers) > 1:
        if chosen:
            raise ValueError(
                f"{', '.join(sorted(chosen))} only apply to a launched server (drop --server)"
            )
        return {"server_url": servers[0], "server_urls": servers,
                "model": model or DEFAULT_SERVED_NAME, "launch_server": None}
    server = servers[0] if servers else None
    if server is not None:
        if chosen:
            raise ValueError(
                f"{', '.join(sorted(chosen))} only apply to a launched server (drop --server)"
            )
        return {"server_url": server, "model": model or DEFAULT_SERVED_NAME, "launch_server": None}
    if model is None:
        if chosen:
            raise ValueError("launching a server needs --model")
        return {"server_url": DEFAULT_SERVER_URL, "model": DEFAULT_SERVED_NAME,
                "launch_server": None}
    served = chosen.get("served_model_name", DEFAULT_SERVED_NAME)
    return {"server_url": DEFAULT_SERVER_URL, "model": served,
            "launch_server": {"model": model, **chosen}}


def node_server_url(env: Mapping[str, str] | None = None) -> str:
    """PAGEGATE_SERVER_URL if set and not blank, else vLLM's default port on this host."""
    value = (os.environ if env is None else env).get(SERVER_URL_ENV, "").strip()
    return value or DEFAULT_SERVER_URL
