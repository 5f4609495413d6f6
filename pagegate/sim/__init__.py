"""A vLLM-compatible server simulator: an honest pure model behind a thin HTTP layer.

- `ServerModel` (model.py): vLLM V1's scheduler, KV cache, preemption and death, pure.
- `FrontEnd` (frontend.py): the API server's event loop and multimodal executor, pure.
- `NodeModel` (node.py): the whole server, front end + queue cap + engines, pure.
- `ServerProfile`, `PROFILES` (profiles.py): the constants per GPU, with their sources.
- workload.py: prompt tokens from the image, output length from the content.
- `SimConfig` (config.py), `SimEngine` (driver.py), `build_app`, `serve_sim` (app.py),
  chat.py and exporter.py: the OpenAI/vLLM HTTP face.
- `sim_command` (command.py): `pagegate sim` / `python -m pagegate.sim`.
"""

from pagegate.sim.app import SimulatorCrashed, build_app, serve_sim
from pagegate.sim.config import SimConfig
from pagegate.sim.driver import SimEngine
from pagegate.sim.frontend import FrontEnd, FrontEndProfile
from pagegate.sim.model import ServerModel
from pagegate.sim.node import NodeModel
from pagegate.sim.profiles import PROFILES, ServerProfile, get_server_profile
from pagegate.sim.records import (
    EngineDeadError,
    Finished,
    MetricsSnapshot,
    NodeSnapshot,
    QueueFullError,
    RequestTooLongError,
)
from pagegate.sim.workload import (
    ClosedLoopResult,
    output_tokens,
    png_size,
    prompt_tokens,
    run_closed_loop,
)

__all__ = [
    "PROFILES",
    "ClosedLoopResult",
    "EngineDeadError",
    "Finished",
    "FrontEnd",
    "FrontEndProfile",
    "MetricsSnapshot",
    "NodeModel",
    "NodeSnapshot",
    "QueueFullError",
    "RequestTooLongError",
    "ServerModel",
    "ServerProfile",
    "SimConfig",
    "SimEngine",
    "SimulatorCrashed",
    "build_app",
    "get_server_profile",
    "output_tokens",
    "png_size",
    "prompt_tokens",
    "run_closed_loop",
    "serve_sim",
]
