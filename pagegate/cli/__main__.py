"""`python -m pagegate.cli [COMMAND]`: the same as the `pagegate` console script."""

from pagegate.cli.main import main

if __name__ == "__main__":
    main()
