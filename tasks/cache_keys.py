"""Cache keys for persisted task results: stable across retries of one flow run, never across runs.

Prefect's DEFAULT cache policy is INPUTS + TASK_SOURCE + RUN_ID. Its TASK_SOURCE part
changes with every edit of a task's code, so deploying a fix and pressing Retry in the
UI would re-run every group (DEFAULT and TASK_SOURCE in prefect/cache_policies.py,
prefect 3.9.1). These keys keep
the RUN_ID part (a retry keeps its flow-run id, so done groups come back Cached) and
replace TASK_SOURCE by `CACHE_VERSION`, bumped by hand when a persisted result's shape
or meaning changes. A new run (nightly rerun, `reprocess`) has a new id and never hits
an old key: across runs, the workspace's committed results are what counts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

CACHE_VERSION = "2"  # 2: task results pickle classes from the pagegate packages (was flat modules)


def _digest(payload: object) -> str:
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:20]


def group_cache_key(flow_run_id: str, group_id: str) -> str:
    """Key of one group's outcome in one flow run (the group id already hashes its URIs)."""
    return f"pagegate-ocr-group-v{CACHE_VERSION}-{flow_run_id}-{group_id}"


def plan_cache_key(flow_run_id: str, sources: Sequence[str], pages_per_group: int) -> str:
    """Key of a run's plan: a retry reuses the groups of the first attempt, even if new
    PDFs have landed since (they belong to the next run, not to this one's retry)."""
    return f"pagegate-plan-v{CACHE_VERSION}-{flow_run_id}-{_digest([list(sources), pages_per_group])}"
