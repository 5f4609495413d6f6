"""Which vLLM server a run on this node uses when none is named: the node's own.

On a cluster every GPU node runs one Prefect worker next to its vLLM server, and the
shard runs the planner starts land on any node. The worker's environment names the
node's server (flow runs inherit it), so one `shard` deployment serves every node.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

SERVER_URL_ENV = "PAGEGATE_SERVER_URL"
DEFAULT_SERVER_URL = "http://127.0.0.1:8000/v1"


def node_server_url(env: Mapping[str, str] | None = None) -> str:
    """PAGEGATE_SERVER_URL if set and not blank, else vLLM's default port on this host."""
    value = (os.environ if env is None else env).get(SERVER_URL_ENV, "").strip()
    return value or DEFAULT_SERVER_URL
