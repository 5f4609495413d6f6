"""`pagegate deploy-files [DIR]`: prefect.yaml and the Kubernetes job template, for a wheel.

With pagegate installed from its wheel there is no checkout to run `prefect deploy` in;
this writes the deployment files the package carries (pagegate.deploy) into DIR, so

    pagegate deploy-files . && prefect deploy --all

works from any folder. Existing files are kept unless --force.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pagegate import deploy
from pagegate.cli.outcome import fail


def deploy_files_command(
    folder: Annotated[Path, typer.Argument(help="Where to write them (created if missing).")] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Replace files that are there.")] = False,
) -> None:
    """Write prefect.yaml and kubernetes-gpu.json (the gpu-k8s pool's base job template)."""
    if folder.exists() and not folder.is_dir():
        fail(f"{folder} is a file, not a folder")
    try:
        written = deploy.write(folder, overwrite=force)
    except FileExistsError as exc:
        fail(f"{exc} exists; --force replaces it")
    except OSError as exc:
        fail(f"cannot write into {folder}: {exc.strerror or exc}")
    for path in written:
        typer.echo(str(path))
