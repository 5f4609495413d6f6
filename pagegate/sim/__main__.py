"""`python -m pagegate.sim [OPTIONS]`: the same command as `pagegate sim`, taking `vllm serve`'s
flags too (unknown ones are listed and ignored), so it can stand in for vLLM."""

from __future__ import annotations

import typer

from pagegate.sim.command import SIM_CONTEXT, sim_command


def main() -> None:
    app = typer.Typer(add_completion=False)
    app.command(context_settings=SIM_CONTEXT)(sim_command)
    app()


if __name__ == "__main__":
    main()
