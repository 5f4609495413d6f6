"""The run's stop switch for a workspace that stopped taking writes.

A full disk, a denied PutObject or a deleted bucket holds for every later write, so each
page rendered and sent after it is GPU time thrown away. The first WriteRefusedError of
a commit or a ledger record trips the switch; from then on no PDF is fetched and no page
is rendered or sent. Pages already on the server finish, and their PDF is committed if
the workspace takes it after all; every other PDF of the run ends `stopped`: no ledger
record (nothing is wrong with it), and the rerun of the same command does it.
"""

from __future__ import annotations

import logging

from pagegate.errors import WriteRefusedError

log = logging.getLogger("pagegate.pdf")


class Halt:
    """Tripped once, by the first lasting write failure; checked before new work."""

    def __init__(self) -> None:
        self.error: WriteRefusedError | None = None

    def trip(self, error: WriteRefusedError) -> None:
        if self.error is None:
            self.error = error
            log.error("the workspace stopped taking writes (%s); no new page is sent", error)

    def check(self) -> None:
        """Raise the tripping error: the caller's work must not start."""
        if self.error is not None:
            raise self.error
