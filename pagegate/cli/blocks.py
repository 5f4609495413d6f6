"""`pagegate blocks register`: make pagegate's Prefect blocks appear in the UI.

Registering a block type is what `prefect block register -m pagegate.tasks.admission_block`
does; this command does the same without the module path to remember, and can save a
document of defaults so the flow's `gate` parameter has something to pick at once.
Storage credentials use prefect-aws's own blocks, registered with its documented
`prefect block register -m prefect_aws` once prefect-aws is installed.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

blocks_app = typer.Typer(
    name="blocks", help="Prefect blocks pagegate uses.", no_args_is_help=True, add_completion=False
)

PREFECT_AWS_HINT = (
    "S3 credentials as blocks: pip install prefect-aws && prefect block register -m prefect_aws"
)


@blocks_app.command("register")
def register(
    save_default: Annotated[
        str | None,
        typer.Option(
            "--save-default",
            metavar="NAME",
            help="Also save an AdmissionGate with the default settings under NAME "
            "(kept if one exists), so the UI has a gate to pick.",
        ),
    ] = None,
) -> None:
    """Register the AdmissionGate block type with the Prefect API (PREFECT_API_URL)."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from pagegate.tasks.admission_block import AdmissionGate

    AdmissionGate.register_type_and_schema()
    typer.echo(
        f"registered block type {AdmissionGate._block_type_name!r} "
        f"(slug {AdmissionGate._block_type_slug})"
    )
    if save_default:
        try:
            AdmissionGate.load(save_default)
        except ValueError:  # Prefect raises ValueError for a missing document
            AdmissionGate().save(save_default)
            typer.echo(f"saved AdmissionGate {save_default!r} with the default settings")
        else:
            typer.echo(f"AdmissionGate {save_default!r} exists; left as it is")
    typer.echo(PREFECT_AWS_HINT)
