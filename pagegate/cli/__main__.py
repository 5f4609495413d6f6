"""`python -m pagegate.cli [COMMAND]`: the same as the `pagegate` console script."""

from pagegate.cli.app import app

if __name__ == "__main__":
    app()
