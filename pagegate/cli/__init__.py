"""The `pagegate` command line (Typer): run, reprocess, sim, demo, stats, plan, blocks."""
