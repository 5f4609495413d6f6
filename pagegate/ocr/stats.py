"""Live counters of one run, updated by page workers in the run's event loop.

One instance per run (never module-level), read by progress displays and summaries.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RunStats:
    started_at: float
    pages_total: int = 0
    pages_done: int = 0
    fallback_pages: int = 0
    page_attempts: int = 0
    capacity_retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    pdfs_done: int = 0
    pdfs_failed: int = 0
    pdfs_by_others: int = 0  # committed by other runs over the workspace (pagegate.claims)

    def pages_per_second(self, now: float) -> float:
        elapsed = now - self.started_at
        return self.pages_done / elapsed if elapsed > 0 else 0.0
