"""The `pagegate` console script and `python -m pagegate.cli`.

For the commands that run flows, the stop handlers (pagegate.cli.stopping) go in
before anything else is imported, and whatever children are left are reaped when the
command ends. The other commands keep Python's defaults: `pagegate sim` is a uvicorn
server with its own, and `stats` or `plan` have nothing to wind down.
"""

from __future__ import annotations

import sys

RUN_COMMANDS = frozenset({"run", "reprocess", "demo"})


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in RUN_COMMANDS:
        from pagegate.cli.app import app

        app(args=args)
        return
    from pagegate.cli.stopping import STOPPER, reap_children
    from pagegate.errors import RunInterrupted

    STOPPER.install()
    try:
        try:
            from pagegate.cli.app import app

            app(args=args)  # exits: SystemExit with the command's code
        finally:
            with STOPPER.shielded():
                reap_children()
    except RunInterrupted as exc:  # a signal before the command's own handling, or after
        from pagegate.cli.outcome import stopped_line

        sys.exit(stopped_line(exc))
