"""How to launch `vllm serve`: the settings as plain data and the argv they make.

Flag names are vLLM's (`vllm serve --help`); the defaults and the set of flags follow
olmOCR's `vllm_server_task` (allenai/olmocr `olmocr/pipeline.py`): it serves as "olmocr",
sets the tensor/data parallel sizes, `--limit-mm-per-prompt '{"video": 0}'`, and forwards any
unknown argument verbatim. A flag whose setting is None is left out, so vLLM's own
default applies (and a stand-in such as the simulator is not handed flags it lacks); an
empty `limit_mm_per_prompt` is left out too, so the command line can drop it.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_COMMAND = "vllm serve {model}"
MODEL_PLACEHOLDER = "{model}"


@dataclass(frozen=True)
class VllmSettings:
    """One managed server. `command` is split like a shell line; `{model}` becomes `model`.

    A command without `{model}` (e.g. "python -m pagegate.sim") gets no model argument:
    that is how tests launch the simulator in vLLM's place.
    """

    model: str
    command: str = DEFAULT_COMMAND
    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str = "olmocr"
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    tensor_parallel_size: int | None = None
    data_parallel_size: int | None = None
    max_num_seqs: int | None = None
    limit_mm_per_prompt: str | None = '{"video": 0}'
    extra_args: tuple[str, ...] = ()
    gpus: str | None = None  # CUDA_VISIBLE_DEVICES of the server ("1", "2,3"); None: inherited

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("model is required")
        if not shlex.split(self.command):
            raise ValueError("command is empty")
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be within 1..65535, not {self.port}")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError("gpu_memory_utilization must be within (0, 1]")
        for name in ("max_model_len", "tensor_parallel_size", "data_parallel_size", "max_num_seqs"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1")

    @property
    def root_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL pages are sent to."""
        return f"{self.root_url}/v1"


def vllm_env(settings: VllmSettings, base: Mapping[str, str]) -> dict[str, str]:
    """The server's environment: `base` with CUDA_VISIBLE_DEVICES set when `gpus` is."""
    env = dict(base)
    if settings.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = settings.gpus
    return env


def parse_gpus(spec: str | Sequence[str]) -> tuple[str, ...]:
    """One server per item: "0,1" -> ("0", "1"); "0+1,2+3" -> ("0,1", "2,3") (two servers,
    two GPUs each, for tensor parallelism). A list is taken item by item the same way."""
    items = spec.split(",") if isinstance(spec, str) else [str(i) for i in spec]
    gpus = tuple(item.strip().replace("+", ",") for item in items if item.strip())
    if not gpus:
        raise ValueError("gpus is empty")
    for group in gpus:
        if not all(part.strip().isdigit() for part in group.split(",")):
            raise ValueError(f"not a GPU index: {group!r}")
    indices = [part.strip() for group in gpus for part in group.split(",")]
    if len(set(indices)) < len(indices):  # two servers on one GPU would fight for its memory
        raise ValueError("a GPU is listed twice")
    return gpus


def vllm_argv(settings: VllmSettings) -> list[str]:
    """The argv of the server process (pure: same settings, same list)."""
    argv = [settings.model if word == MODEL_PLACEHOLDER else word
            for word in shlex.split(settings.command)]
    argv += ["--host", settings.host, "--port", str(settings.port),
             "--served-model-name", settings.served_model_name]
    optional: tuple[tuple[str, object], ...] = (
        ("--gpu-memory-utilization", settings.gpu_memory_utilization),
        ("--max-model-len", settings.max_model_len),
        ("--tensor-parallel-size", settings.tensor_parallel_size),
        ("--data-parallel-size", settings.data_parallel_size),
        ("--max-num-seqs", settings.max_num_seqs),
        ("--limit-mm-per-prompt", settings.limit_mm_per_prompt),
    )
    for flag, value in optional:
        if value is not None and value != "":
            argv += [flag, str(value)]
    return argv + list(settings.extra_args)
