"""How to launch `vllm serve`: the settings as plain data and the argv they make.

Flag names are vLLM's (`vllm serve --help`); the defaults and the set of flags follow
olmOCR's `vllm_server_task` (allenai/olmocr `olmocr/pipeline.py`): it serves as "olmocr",
sets the tensor/data parallel sizes, `--limit-mm-per-prompt '{"video": 0}'`, and forwards any
unknown argument verbatim. A flag whose setting is None is left out, so vLLM's own
default applies (and a stand-in such as the simulator is not handed flags it lacks); an
empty `limit_mm_per_prompt` is left out too, so the command line can drop it.

The one flag pagegate adds on its own is vLLM's server-side safety net,
`--max-num-queued-reqs` (PR #49445, in vLLM 0.32): past that many requests in the engines
(waiting + running, all data-parallel engines) vLLM answers 503, which pagegate's page
client treats as a capacity error (back off, retry, no page attempt spent), instead of
growing a queue that can take the server down. `queue_cap` says what it is and why.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

DEFAULT_COMMAND = "vllm serve {model}"
MODEL_PLACEHOLDER = "{model}"
VLLM_DEFAULT_MAX_NUM_SEQS = 256
"""vLLM's --max-num-seqs when none is given, on GPUs below 70 GiB (1,024 at or above:
`get_batch_defaults`, vllm/engine/arg_utils.py). The launcher cannot see the GPU, so it
assumes the smaller; on an H100 the KV cache holds fewer pages than 2 x 256 anyway."""
QUEUE_CAP_SLOTS = 2
"""The default cap in running slots: a full batch waiting behind the running one, so the
engine refills every slot the moment one frees, while a deep queue (olmOCR's 1,600 in
flight) is refused instead of parked."""


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
    max_num_queued_reqs: int | None = None
    """vLLM's --max-num-queued-reqs: None chooses it (`queue_cap`), 0 leaves it off."""
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
        if self.max_num_queued_reqs is not None and self.max_num_queued_reqs < 0:
            raise ValueError("max_num_queued_reqs must be >= 0 (0 leaves it off)")

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


def _flag_value(words: Sequence[str], flag: str) -> str | None:
    """The value of `flag` in an argv (`--flag N` or `--flag=N`; the last one wins)."""
    found = None
    for i, word in enumerate(words):
        if word == flag and i + 1 < len(words):
            found = words[i + 1]
        elif word.startswith(flag + "="):
            found = word.split("=", 1)[1]
    return found


def queue_cap(settings: VllmSettings) -> tuple[int | None, str]:
    """The --max-num-queued-reqs to pass (None: none) and the reason, for the log.

    Unless set, QUEUE_CAP_SLOTS x max_num_seqs x data_parallel_size: vLLM counts the cap
    over every engine behind the API server, and max_num_seqs is per engine. The two are
    read from the settings, else from the command line and the extra arguments (a command
    may carry its own `--max-num-seqs`), else vLLM's default. A cap given in the command
    or the extra arguments is the user's and wins.
    """
    words = [*shlex.split(settings.command), *settings.extra_args]
    if _flag_value(words, "--max-num-queued-reqs") is not None:
        return None, "--max-num-queued-reqs is on the command line already"
    if settings.max_num_queued_reqs == 0:
        return None, "off (max_num_queued_reqs 0)"
    if settings.max_num_queued_reqs is not None:
        return settings.max_num_queued_reqs, "as set"

    def number(field: int | None, flag: str) -> int | None:
        if field is not None:
            return field
        value = _flag_value(words, flag)
        return int(value) if value is not None and value.isdigit() else None

    seqs = number(settings.max_num_seqs, "--max-num-seqs")
    seqs_note = (f"max_num_seqs {seqs}" if seqs is not None
                 else f"max_num_seqs {VLLM_DEFAULT_MAX_NUM_SEQS} (vLLM's default below 70 GiB)")
    dp = number(settings.data_parallel_size, "--data-parallel-size") or 1
    cap = QUEUE_CAP_SLOTS * (seqs or VLLM_DEFAULT_MAX_NUM_SEQS) * dp
    return cap, f"{QUEUE_CAP_SLOTS} x {seqs_note}" + (f" x {dp} engines" if dp > 1 else "")


def vllm_argv(settings: VllmSettings, *, interpreter: str = sys.executable) -> list[str]:
    """The argv of the server process (pure: same settings and interpreter, same list).

    `python -m pagegate.<module>` runs under `interpreter`, the one running pagegate: a
    bare `python` on PATH is often the system's, which has no pagegate installed.
    """
    argv = [settings.model if word == MODEL_PLACEHOLDER else word
            for word in shlex.split(settings.command)]
    if argv[:2] in (["python", "-m"], ["python3", "-m"]) and argv[2:3] != [] \
            and argv[2].split(".")[0] == "pagegate":
        argv[0] = interpreter
    argv += ["--host", settings.host, "--port", str(settings.port),
             "--served-model-name", settings.served_model_name]
    optional: tuple[tuple[str, object], ...] = (
        ("--gpu-memory-utilization", settings.gpu_memory_utilization),
        ("--max-model-len", settings.max_model_len),
        ("--tensor-parallel-size", settings.tensor_parallel_size),
        ("--data-parallel-size", settings.data_parallel_size),
        ("--max-num-seqs", settings.max_num_seqs),
        ("--limit-mm-per-prompt", settings.limit_mm_per_prompt),
        ("--max-num-queued-reqs", queue_cap(settings)[0]),
    )
    for flag, value in optional:
        if value is not None and value != "":
            argv += [flag, str(value)]
    return argv + list(settings.extra_args)


def with_profile_args(settings: VllmSettings, serve_args: Sequence[str]) -> VllmSettings:
    """`settings` with a model profile's `vllm serve` flags added to its extra arguments.

    Only a command that serves a model (`{model}` in it: vLLM itself) gets them; a stand-in
    such as the simulator does not take vLLM's model flags. A flag the command or the
    extra arguments already give is the user's and is left as it is. `serve_args` is a
    flat argv: a flag, then its value when the next word is not a flag.
    """
    if MODEL_PLACEHOLDER not in shlex.split(settings.command):
        return settings
    words = [*shlex.split(settings.command), *settings.extra_args]
    given = {w.split("=", 1)[0].replace("_", "-") for w in words if w.startswith("--")}
    added: list[str] = []
    i = 0
    while i < len(serve_args):
        flag = serve_args[i]
        has_value = i + 1 < len(serve_args) and not serve_args[i + 1].startswith("--")
        group = list(serve_args[i:i + 2] if has_value else serve_args[i:i + 1])
        if flag.split("=", 1)[0].replace("_", "-") not in given:
            added += group
        i += len(group)
    return replace(settings, extra_args=(*added, *settings.extra_args))
