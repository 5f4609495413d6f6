"""What a PDF, a group and a run produced, as plain data a Prefect task can return."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

PdfStatus = Literal["ok", "failed", "skipped"]


@dataclass(frozen=True)
class PdfOutcome:
    """The result of one PDF. `skipped` means it was already committed by an earlier run."""

    uri: str
    status: PdfStatus
    pages: int = 0
    fallback_pages: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reason: str | None = None
    detail: str | None = None
    location: str | None = None        # result object, or ledger record for failures


@dataclass(frozen=True)
class GroupOutcome:
    group_id: str
    pdfs: tuple[PdfOutcome, ...]

    @property
    def failed(self) -> tuple[PdfOutcome, ...]:
        return tuple(p for p in self.pdfs if p.status == "failed")


@dataclass
class RunTotals:
    """Totals over a run, for the summary and the exit code."""

    pdfs_ok: int = 0
    pdfs_failed: int = 0
    pdfs_skipped: int = 0
    pages: int = 0
    fallback_pages: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    failures: list[PdfOutcome] = field(default_factory=list)

    @classmethod
    def of(cls, groups: Iterable[GroupOutcome]) -> RunTotals:
        totals = cls()
        for group in groups:
            for pdf in group.pdfs:
                if pdf.status == "ok":
                    totals.pdfs_ok += 1
                elif pdf.status == "skipped":
                    totals.pdfs_skipped += 1
                else:
                    totals.pdfs_failed += 1
                    totals.failures.append(pdf)
                totals.pages += pdf.pages
                totals.fallback_pages += pdf.fallback_pages
                totals.input_tokens += pdf.input_tokens
                totals.output_tokens += pdf.output_tokens
        return totals
