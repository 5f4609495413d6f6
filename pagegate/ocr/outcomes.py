"""What a PDF, a group and a run produced, as plain data a Prefect task can return."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, astuple, dataclass, field
from typing import Any, Literal

PdfStatus = Literal["ok", "failed", "skipped", "stopped", "handed_over"]


@dataclass(frozen=True)
class PdfOutcome:
    """The result of one PDF. `skipped`: committed by an earlier run. `stopped`: not done,
    because the workspace stopped taking writes (pagegate.ocr.halt); no ledger record.
    `handed_over`: not done here, because another run took the group over
    (pagegate.claims); no record either."""

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
class Tally:
    """Counts of PDFs that need no line of their own (done and not flagged, or skipped)."""

    ok: int = 0
    skipped: int = 0
    stopped: int = 0
    pages: int = 0
    fallback_pages: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def merge(self, other: Tally) -> Tally:
        return Tally(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def add(self, pdf: PdfOutcome) -> Tally:
        return Tally(self.ok + (pdf.status == "ok"), self.skipped + (pdf.status == "skipped"),
                     self.stopped + (pdf.status in ("stopped", "handed_over")), self.pages + pdf.pages,
                     self.fallback_pages + pdf.fallback_pages,
                     self.input_tokens + pdf.input_tokens, self.output_tokens + pdf.output_tokens)


@dataclass(frozen=True)
class GroupOutcome:
    """What one group produced: the PDFs named one by one, and a tally of the rest.

    A group task returns it `compact()`: a run keeps every group's outcome until it ends,
    and Prefect keeps up to 1,000 task results in memory, so a line per committed PDF
    would grow with the run; only failed and flagged PDFs keep theirs (the summary and
    the failure table name them).
    """

    group_id: str
    pdfs: tuple[PdfOutcome, ...]
    tally: Tally = field(default_factory=Tally)
    by: str | None = None  # the other run that did the group; None: this run

    @property
    def handed_over(self) -> tuple[PdfOutcome, ...]:
        return tuple(p for p in self.pdfs if p.status == "handed_over")

    @property
    def failed(self) -> tuple[PdfOutcome, ...]:
        return tuple(p for p in self.pdfs if p.status == "failed")

    @property
    def stopped(self) -> int:
        """PDFs not done because the workspace stopped taking writes."""
        return self.tally.stopped + sum(p.status == "stopped" for p in self.pdfs)

    @property
    def count(self) -> int:
        """PDFs in the group, named or tallied."""
        return len(self.pdfs) + self.tally.ok + self.tally.skipped + self.tally.stopped

    @property
    def ok_pages(self) -> int:
        return self.tally.pages + sum(p.pages for p in self.pdfs if p.status == "ok")

    def compact(self) -> GroupOutcome:
        """The same totals, naming only failed and flagged PDFs."""
        named, tally = [], self.tally
        for pdf in self.pdfs:
            if pdf.status in ("failed", "handed_over") or pdf.reason:
                named.append(pdf)
            else:
                tally = tally.add(pdf)
        return GroupOutcome(self.group_id, tuple(named), tally, self.by)


@dataclass
class RunTotals:
    """Totals over a run, for the summary and the exit code."""

    pdfs_ok: int = 0
    pdfs_failed: int = 0
    pdfs_skipped: int = 0
    pdfs_stopped: int = 0
    pages: int = 0
    fallback_pages: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    failures: list[PdfOutcome] = field(default_factory=list)
    others_ok: int = 0                  # of pdfs_ok, those another run did (pagegate.claims)
    others: tuple[str, ...] = ()        # the other runs that did some of the groups

    @property
    def this_run_ok(self) -> int:
        return self.pdfs_ok - self.others_ok

    @classmethod
    def of(cls, groups: Iterable[GroupOutcome]) -> RunTotals:
        tally, failures = Tally(), []
        others_ok, others = 0, dict[str, None]()
        for group in groups:
            if group.by is not None:
                others[group.by] = None
                others_ok += group.tally.ok + sum(p.status == "ok" for p in group.pdfs)
            tally = tally.merge(group.tally)
            for pdf in group.pdfs:
                tally = tally.add(pdf)
                if pdf.status == "failed":
                    failures.append(pdf)
        return cls(pdfs_ok=tally.ok, pdfs_failed=len(failures), pdfs_skipped=tally.skipped,
                   pdfs_stopped=tally.stopped,
                   pages=tally.pages, fallback_pages=tally.fallback_pages,
                   input_tokens=tally.input_tokens, output_tokens=tally.output_tokens,
                   failures=failures, others_ok=others_ok, others=tuple(others))


def outcome_to_json(outcome: GroupOutcome) -> dict[str, Any]:
    """A group's outcome as JSON data, as a claim's release marker carries it to other runs."""
    return asdict(outcome)


def outcome_from_json(data: Mapping[str, Any]) -> GroupOutcome:
    """The inverse of `outcome_to_json`; a field it does not know is refused (KeyError/TypeError)."""
    return GroupOutcome(
        group_id=str(data["group_id"]),
        pdfs=tuple(PdfOutcome(**pdf) for pdf in data["pdfs"]),
        tally=Tally(**data["tally"]),
        by=data.get("by"),
    )
