"""What each run leaves in the workspace besides documents: its plan, record and chart.

    runs/<run id>/plan.json     the groups the run planned (ids, planned pages, PDF URIs)
    runs/<run id>/run.json      the run's totals, rates and gate figures, once it ends
    runs/<run id>/chart.png     server queue, pages in flight and gate releases over time

The run id is the Prefect flow run id, so a UI retry of a run rewrites its own folder.
`pagegate stats` reads these: the union of all recorded plans is the work the
workspace has been asked to do, and what has no result yet is the work remaining.
Pure (de)serialisation; the Store does the I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pagegate.plan.groups import Group

RUNS_PREFIX = "runs/"
PLAN_NAME = "plan.json"
RECORD_NAME = "run.json"
CHART_NAME = "chart.png"


def run_key(run_id: str, name: str) -> str:
    if not run_id or "/" in run_id or run_id in (".", ".."):
        raise ValueError(f"invalid run id {run_id!r}")
    return f"{RUNS_PREFIX}{run_id}/{name}"


def run_id_of(key: str) -> str | None:
    """'runs/<id>/plan.json' -> '<id>'; None for anything else."""
    parts = key.split("/")
    if len(parts) == 3 and parts[0] + "/" == RUNS_PREFIX and parts[1]:
        return parts[1]
    return None


@dataclass(frozen=True)
class RunPlan:
    run_id: str
    created_at: str
    sources: tuple[str, ...]
    groups: tuple[Group, ...]

    @property
    def pdfs(self) -> int:
        return sum(len(g) for g in self.groups)

    @property
    def pages(self) -> int:
        return sum(g.pages for g in self.groups)


def plan_to_json(plan: RunPlan) -> bytes:
    payload = {
        "run_id": plan.run_id,
        "created_at": plan.created_at,
        "sources": list(plan.sources),
        "groups": [{"id": g.id, "pages": g.pages, "uris": list(g.uris)} for g in plan.groups],
    }
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")


def plan_from_json(data: bytes) -> RunPlan:
    payload = json.loads(data)
    if not isinstance(payload, dict) or not isinstance(payload.get("groups"), list):
        raise ValueError("a run plan is a JSON object with a 'groups' list")
    groups = tuple(
        Group(id=str(g["id"]), uris=tuple(str(u) for u in g["uris"]), pages=int(g["pages"]))
        for g in payload["groups"]
    )
    return RunPlan(
        run_id=str(payload.get("run_id", "")),
        created_at=str(payload.get("created_at", "")),
        sources=tuple(str(s) for s in payload.get("sources", ())),
        groups=groups,
    )


def record_to_json(record: Mapping[str, Any]) -> bytes:
    return json.dumps(dict(record), ensure_ascii=False, indent=2, sort_keys=True).encode("utf-8")


def record_from_json(data: bytes) -> dict[str, Any]:
    payload = json.loads(data)
    if not isinstance(payload, dict):
        raise ValueError("a run record is a JSON object")
    return payload


def latest(records: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The record of the run that finished last (ISO timestamps sort as text)."""
    done = [r for r in records if isinstance(r.get("finished_at"), str)]
    return max(done, key=lambda r: str(r["finished_at"])) if done else None
