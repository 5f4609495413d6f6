"""A vLLM-compatible server simulator: an honest pure model behind a thin HTTP layer.

- `ServerModel` (model.py): vLLM V1's scheduler, KV cache, preemption and death, pure.
- `ServerProfile`, `PROFILES` (profiles.py): the constants per GPU, with their sources.
- workload.py: prompt tokens from the image, output length from the content.
- `build_app`, `serve_sim`, `SimConfig` (app.py): the OpenAI/vLLM HTTP face.
- `sim_command` (command.py): `pagegate sim` / `python -m pagegate.sim`.
"""

from pagegate.sim.app import SimConfig, SimEngine, SimulatorCrashed, build_app, serve_sim
from pagegate.sim.model import (
    EngineDeadError,
    Finished,
    MetricsSnapshot,
    QueueFullError,
    RequestTooLongError,
    ServerModel,
)
from pagegate.sim.profiles import PROFILES, ServerProfile, get_server_profile
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
    "MetricsSnapshot",
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
