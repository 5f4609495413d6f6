"""`python -m pagegate.sim [OPTIONS]`: the same command as `pagegate sim`."""

from __future__ import annotations

import typer

from pagegate.sim.command import sim_command


def main() -> None:
    app = typer.Typer(add_completion=False)
    app.command()(sim_command)
    app()


if __name__ == "__main__":
    main()
