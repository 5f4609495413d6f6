"""`pagegate sim`: serve the vLLM-compatible simulator from the command line.

The lead registers it with `app.command("sim")(sim_command)`; `python -m pagegate.sim`
runs the same function. Every option maps one-to-one onto a `SimConfig` field
(snake_case field, --kebab-case flag), which is what tests/fixtures/sim.py relies on.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated

import typer

from pagegate.sim.app import SimConfig, SimulatorCrashed, ready_line, serve_sim
from pagegate.sim.profiles import PROFILES

CRASH_EXIT_CODE = 3
"""Exit status after a simulated engine death (any non-zero status would do)."""

_OFF = "0 turns it off; unset keeps the profile's value."


def sim_command(
    port: Annotated[int, typer.Option(help="TCP port; 0 picks a free one (printed when ready).")] = 8000,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    profile: Annotated[str, typer.Option(help=f"Server profile: {', '.join(PROFILES)}.")] = "ci",
    time_scale: Annotated[
        float, typer.Option(help="Simulated seconds per wall second (30 = thirty times faster).")
    ] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed of the per-page output lengths.")] = 0,
    max_num_seqs: Annotated[int | None, typer.Option(help="Running slots (vLLM --max-num-seqs).")] = None,
    kv_blocks: Annotated[int | None, typer.Option(help="KV cache size in 16-token blocks.")] = None,
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
        int | None, typer.Option(help=f"Answer 503 when this many requests wait (vLLM --max-num-queued-reqs). {_OFF}")
    ] = None,
    served_model_name: Annotated[str, typer.Option(help="Model name in /v1/models and metrics.")] = "olmocr",
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
) -> None:
    """Serve a simulated vLLM server (OpenAI API, /health, /metrics) until stopped or crashed."""
    try:
        config = SimConfig(
            profile=profile,
            max_num_seqs=max_num_seqs,
            kv_blocks=kv_blocks,
            max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=max_model_len,
            crash_waiting=crash_waiting,
            host_mem_limit_mb=host_mem_limit_mb,
            max_num_queued_reqs=max_num_queued_reqs,
            seed=seed,
            time_scale=time_scale,
            served_model_name=served_model_name,
            garbage_below_temperature=garbage_below_temperature,
            rotate_landscape=rotate_landscape,
            reject_status_every=reject_status_every,
            hang_after_requests=hang_after_requests,
        )
        config.server_profile()
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None

    def announce(root_url: str) -> None:
        print(ready_line(config, root_url), flush=True)

    try:
        asyncio.run(serve_sim(config, host=host, port=port, on_ready=announce))
    except SimulatorCrashed as exc:
        print(f"pagegate sim: engine died ({exc}); exiting", file=sys.stderr, flush=True)
        raise typer.Exit(CRASH_EXIT_CODE) from None
    except KeyboardInterrupt:
        pass
