"""The claim and heartbeat objects in a workspace, over any Store. Blocking I/O.

    claims/<group id>/<generation>.json   {"run": ..., "released": false|true, "outcome": ...}
    heartbeats/<run>.json                 {"beat": n, "ended": false|true, "host": ..., "pid": ...}

A group's claim is its newest generation. Every change (a first claim, a takeover, a
release) creates the next generation with `Store.create`, so of two runs that saw the
same generation exactly one makes the next: a compare-and-swap built from the one
atomic primitive both backends have. Generations are never deleted, so "absent" always
means "nobody made it yet". A group's claim objects stay after the run (a few hundred
bytes each); delete claims/ and heartbeats/ when no run is going, to start afresh.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from typing import Any

from pagegate.errors import DownloadError
from pagegate.io.store import Store

CLAIMS = "claims/"
HEARTBEATS = "heartbeats/"


def claim_key(group_id: str, generation: int) -> str:
    return f"{CLAIMS}{group_id}/{generation:08d}.json"


def beat_key(run: str) -> str:
    return f"{HEARTBEATS}{run}.json"


@dataclass(frozen=True)
class Claim:
    """The newest generation of one group's claim."""

    generation: int
    run: str
    name: str  # the run's display name (its Prefect flow run's)
    released: bool
    outcome: dict[str, Any] | None  # the holder's GroupOutcome (JSON) once released
    modified: float | None = None   # when it was made, by the store's clock


@dataclass(frozen=True)
class Beat:
    """What a run's heartbeat object says: its counter, and whether the run has ended."""

    count: int
    ended: bool
    name: str


class Board:
    """One run's view of the workspace's claims and heartbeats; `run` is its own name."""

    def __init__(self, store: Store, run: str, *, name: str | None = None) -> None:
        self.store = store
        self.run = run
        self.name = name or run  # shown to other runs (the Prefect flow run's name)

    def look(self, group_id: str) -> Claim | None:
        """The group's newest claim; None when no run ever claimed it."""
        made = {int(info.key.rsplit("/", 1)[1].split(".")[0]): info.modified
                for info in self.store.list(f"{CLAIMS}{group_id}/") if info.key.endswith(".json")}
        if not made:
            return None
        newest = max(made)
        data = json.loads(self.store.read_bytes(claim_key(group_id, newest)))
        return Claim(newest, str(data["run"]), str(data.get("name") or data["run"]),
                     bool(data["released"]), data.get("outcome"), made[newest])

    def take(self, group_id: str, after: int | None) -> int | None:
        """Claim the group as the generation after `after` (None: the first); that
        generation, or None when another run made it first."""
        generation = 0 if after is None else after + 1
        return generation if self._put(group_id, generation, released=False) else None

    def release(self, group_id: str, generation: int, outcome: dict[str, Any] | None) -> bool:
        """Hand the group back after `generation`, with the outcome when it is done
        (None: not done, the next run to look takes it); False if it was no longer ours."""
        return self._put(group_id, generation + 1, released=True, outcome=outcome)

    def _put(self, group_id: str, generation: int, *, released: bool,
             outcome: dict[str, Any] | None = None) -> bool:
        data = {"run": self.run, "name": self.name, "released": released, "outcome": outcome}
        return self.store.create(claim_key(group_id, generation), _encode(data))

    def beat(self, count: int, *, ended: bool = False) -> None:
        data = {"beat": count, "ended": ended, "name": self.name,
                "host": socket.gethostname(), "pid": os.getpid()}
        self.store.write_bytes(beat_key(self.run), _encode(data))

    def mark(self) -> float | None:
        """Write this run's first heartbeat and return when it landed, by the store's
        clock: claims released after it are news to this run (pagegate.ocr.turns)."""
        self.beat(0)
        return next((info.modified for info in self.store.list(beat_key(self.run))), None)

    def beat_of(self, run: str) -> Beat | None:
        """Another run's heartbeat; None when it has none (it died before its first)."""
        try:
            data = json.loads(self.store.read_bytes(beat_key(run)))
        except DownloadError as exc:
            if exc.code == "NoSuchKey":
                return None
            raise
        return Beat(int(data["beat"]), bool(data.get("ended")), str(data.get("name") or run))


def _encode(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode("utf-8")
