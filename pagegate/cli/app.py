"""The `pagegate` command line: the Typer app and its commands, one module each.

    run, reprocess   pagegate.cli.run (a flow run, then its summary)
    demo             pagegate.cli.demo
    plan             pagegate.cli.plan (shards, as the planner flow would cut them)
    stats            pagegate.cli.stats
    sim              pagegate.sim.command (the vLLM-compatible simulator)
    blocks           pagegate.cli.blocks
    deploy-files     pagegate.cli.deploy_files (prefect.yaml and the Kubernetes template)

Prefect is imported only by the commands that run flows, so `pagegate sim` and
`--help` stay quick.
"""

from __future__ import annotations

import typer

from pagegate.cli.blocks import blocks_app
from pagegate.cli.demo import demo_command
from pagegate.cli.deploy_files import deploy_files_command
from pagegate.cli.plan import plan_command
from pagegate.cli.run import reprocess_command, run_command
from pagegate.cli.stats import stats_command
from pagegate.sim.command import SIM_CONTEXT, sim_command

app = typer.Typer(
    name="pagegate",
    help="OCR large PDF collections through a vision-language model on vLLM, behind an admission gate.",
    no_args_is_help=True,
    add_completion=False,
)
app.command("run")(run_command)
app.command("reprocess")(reprocess_command)
app.command("demo")(demo_command)
app.command("plan")(plan_command)
app.command("stats")(stats_command)
app.command(
    "sim",
    help="Serve the vLLM-compatible simulator (OpenAI API + /metrics).",
    context_settings=SIM_CONTEXT,  # takes `vllm serve` flags, as python -m pagegate.sim does
)(sim_command)
app.add_typer(blocks_app)
app.command("deploy-files")(deploy_files_command)

if __name__ == "__main__":
    app()
