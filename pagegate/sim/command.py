"""`pagegate sim`: serve the vLLM-compatible simulator from the command line.

The lead registers it with `app.command("sim")(sim_command)`; `python -m pagegate.sim`
runs the same function. Every simulator option maps one-to-one onto a `SimConfig` field
(snake_case field, --kebab-case flag), which is what tests/fixtures/sim.py relies on.

It also stands in for `vllm serve`: the launcher (pagegate/server/settings.py
`vllm_argv`) passes vLLM's flags, so the command takes vLLM's spelling of what it models
(`--served-model-name`, `--port`, `--host`, `--max-num-seqs`, `--max-num-queued-reqs`,
`--api-server-count`, `--data-parallel-size`, `--max-model-len`,
`--max-num-batched-tokens`, `--num-gpu-blocks-override`, `--override-generation-config`'s
`max_new_tokens`, a model name) and ignores every other flag, listing them once at
start-up. Registered with `SIM_CONTEXT` (as `python -m pagegate.sim` is), unknown flags
reach `ctx.args`; without it they are refused as before.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated, Any

import typer

from pagegate.sim.app import SimulatorCrashed, ready_line, serve_sim
from pagegate.sim.config import SimConfig
from pagegate.sim.pages import pdf_paths
from pagegate.sim.profiles import PROFILES

CRASH_EXIT_CODE = 3
"""Exit status after a simulated engine death (any non-zero status would do)."""
SIM_CONTEXT: dict[str, Any] = {"allow_extra_args": True, "ignore_unknown_options": True}
"""Typer context settings that let the command take `vllm serve`'s other flags."""

_OFF = "0 turns it off; unset keeps the profile's value."


def split_vllm_extras(args: list[str]) -> tuple[str | None, list[str]]:
    """(the model, the ignored flags) from the arguments the command does not know.

    A leading bare word is the model (`vllm serve MODEL`; a `serve` before it is
    skipped); every `--flag` is ignored with its value, if the next word is not a flag.
    """
    words = list(args)
    if words[:1] == ["serve"]:
        words = words[1:]
    model = words.pop(0) if words and not words[0].startswith("-") else None
    ignored = [w.split("=", 1)[0] for w in words if w.startswith("-")]
    return model, ignored


def max_new_tokens_of(override_generation_config: str | None) -> int | None:
    """`max_new_tokens` from vLLM's --override-generation-config JSON (None if absent)."""
    if not override_generation_config:
        return None
    try:
        values = json.loads(override_generation_config)
    except ValueError:
        raise typer.BadParameter("--override-generation-config is not JSON") from None
    value = values.get("max_new_tokens") if isinstance(values, dict) else None
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise typer.BadParameter("max_new_tokens must be an integer")
    return value


def sim_command(
    ctx: typer.Context,
    port: Annotated[int, typer.Option(help="TCP port; 0 picks a free one (printed when ready).")] = 8000,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    profile: Annotated[str, typer.Option(help=f"Server profile: {', '.join(PROFILES)}.")] = "ci",
    time_scale: Annotated[
        float, typer.Option(help="Simulated seconds per wall second (30 = thirty times faster).")
    ] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed of the per-page output lengths.")] = 0,
    max_num_seqs: Annotated[int | None, typer.Option(help="Running slots (vLLM --max-num-seqs).")] = None,
    kv_blocks: Annotated[int | None, typer.Option(help="KV cache size in blocks.")] = None,
    num_gpu_blocks_override: Annotated[
        int | None, typer.Option(help="vLLM's name for --kv-blocks.")
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None, typer.Option(help="Token budget per engine step (vLLM --max-num-batched-tokens).")
    ] = None,
    max_model_len: Annotated[
        int | None, typer.Option(help="Context length (vLLM --max-model-len): 400 when max_tokens or the prompt exceeds it; else max_tokens is cut to fit.")
    ] = None,
    crash_waiting: Annotated[
        int | None, typer.Option(help=f"Die when more requests than this wait. {_OFF}")
    ] = None,
    host_mem_limit_mb: Annotated[
        float | None, typer.Option(help=f"Die when requests in flight hold more host RAM (MB). {_OFF}")
    ] = None,
    max_num_queued_reqs: Annotated[
        int | None, typer.Option(help=f"Answer 503 once the engines hold this many requests (vLLM --max-num-queued-reqs). {_OFF}")
    ] = None,
    api_server_count: Annotated[
        int | None, typer.Option(help="API server processes, each with one preprocessing thread (vLLM --api-server-count).")
    ] = None,
    data_parallel_size: Annotated[
        int | None, typer.Option(help="Engines behind the front end (vLLM --data-parallel-size).")
    ] = None,
    max_new_tokens: Annotated[
        int | None, typer.Option(help="Cap every reply at this many tokens.")
    ] = None,
    override_generation_config: Annotated[
        str | None, typer.Option(help="vLLM's JSON; its max_new_tokens caps every reply.")
    ] = None,
    model: Annotated[str | None, typer.Option(help="vLLM's --model: the served name unless --served-model-name is given.")] = None,
    served_model_name: Annotated[
        str | None, typer.Option(help="Model name in /v1/models and metrics (default: the model, else olmocr).")
    ] = None,
    garbage_below_temperature: Annotated[
        float, typer.Option(help="Fault: replies lose their front matter below this temperature.")
    ] = 0.0,
    rotate_landscape: Annotated[
        bool, typer.Option(help="Fault: landscape pages come back rotation-invalid (correction 90).")
    ] = False,
    reject_status_every: Annotated[
        int, typer.Option(help="Fault: every k-th chat request gets 503 (0 = never).")
    ] = 0,
    hang_after_requests: Annotated[
        int, typer.Option(help="Fault: the engine hangs (API still up, tokens flat) after this many chat requests; SIGUSR1 hangs it at once (0 = never).")
    ] = 0,
    pdfs: Annotated[
        list[str] | None, typer.Option(help="PDFs, or folders of them, whose pages the simulator reads: it answers each with the page's text layer, in the requesting profile's format. Repeatable.")
    ] = None,
    malformed_pages: Annotated[
        str, typer.Option(help="Fault: replies to --pdfs pages whose text matches this regex are malformed.")
    ] = "",
    cut_pages: Annotated[
        str, typer.Option(help="Fault: replies to --pdfs pages whose text matches this regex run out of tokens (finish_reason length).")
    ] = "",
) -> None:
    """Serve a simulated vLLM server (OpenAI API, /health, /metrics) until stopped or crashed."""
    positional, ignored = split_vllm_extras(list(ctx.args))
    try:
        config = SimConfig(
            profile=profile,
            max_num_seqs=max_num_seqs,
            kv_blocks=kv_blocks if kv_blocks is not None else num_gpu_blocks_override,
            max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=max_model_len,
            crash_waiting=crash_waiting,
            host_mem_limit_mb=host_mem_limit_mb,
            max_num_queued_reqs=max_num_queued_reqs,
            api_server_count=api_server_count,
            data_parallel_size=data_parallel_size,
            max_new_tokens=(max_new_tokens if max_new_tokens is not None
                            else max_new_tokens_of(override_generation_config)),
            seed=seed,
            time_scale=time_scale,
            served_model_name=served_model_name or model or positional or "olmocr",
            garbage_below_temperature=garbage_below_temperature,
            rotate_landscape=rotate_landscape,
            reject_status_every=reject_status_every,
            hang_after_requests=hang_after_requests,
            pdfs=tuple(pdfs or ()),
            malformed_pages=malformed_pages,
            cut_pages=cut_pages,
        )
        pdf_paths(pdfs or ())  # a path that is not there fails here, in one line
        config.server_profile()
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if ignored:
        print(f"pagegate sim: ignoring vLLM options it does not model: {', '.join(ignored)}",
              file=sys.stderr, flush=True)

    def announce(root_url: str) -> None:
        print(ready_line(config, root_url), flush=True)

    try:
        asyncio.run(serve_sim(config, host=host, port=port, on_ready=announce))
    except SimulatorCrashed as exc:
        print(f"pagegate sim: engine died ({exc}); exiting", file=sys.stderr, flush=True)
        raise typer.Exit(CRASH_EXIT_CODE) from None
    except KeyboardInterrupt:
        pass
