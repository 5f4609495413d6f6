"""The workspace's shared plan: which group each PDF belongs to, for every run.

Groups are cut from the PDFs still to do, so two runs that plan at different moments
(one started while the other had committed some PDFs) would cut different groups, and
claims on group ids would not keep them apart. So the first run to plan a PDF fixes its
group for every later run over that workspace: the plan is an append-only log of parts,

    plan/<n>.json    {"run": ..., "groups": [{"id": ..., "pdfs": [[uri, pages], ...]}, ...]}

each made with `Store.create`. A run reads every part, keeps the groups of the PDFs it
lists, and cuts only PDFs that no part names into new groups; it then makes the next
part. If another run made that part first, the run reads it, drops the PDFs it names,
and tries the part after. A PDF is therefore in exactly one group, whoever planned it.

The parts also hold each PDF's page count, so a run that finds its PDFs planned does not
read them again to count their pages.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from pagegate.errors import StorageError
from pagegate.io.store import Store
from pagegate.plan.groups import Group, PlannedPdf, iter_groups

PLAN = "plan/"
MAX_ATTEMPTS = 100  # parts another run made first, one after the other, before giving up


def part_key(number: int) -> str:
    return f"{PLAN}{number:08d}.json"


@dataclass
class SharedPlan:
    """The parts read so far: each planned PDF's group and pages, groups in plan order."""

    groups: dict[str, list[PlannedPdf]] = field(default_factory=dict)
    group_of: dict[str, str] = field(default_factory=dict)
    parts: int = 0  # parts 0 .. parts-1 are read

    def add(self, groups: Iterable[tuple[str, Sequence[PlannedPdf]]]) -> None:
        for group_id, pdfs in groups:
            if group_id in self.groups:
                continue
            self.groups[group_id] = list(pdfs)
            for pdf in pdfs:
                self.group_of.setdefault(pdf.uri, group_id)


def read_parts(store: Store, plan: SharedPlan) -> SharedPlan:
    """Read the parts after those `plan` holds, in order, into it."""
    numbers = sorted(int(info.key[len(PLAN):].split(".")[0]) for info in store.list(PLAN)
                     if info.key.endswith(".json"))
    for number in (n for n in numbers if n >= plan.parts):
        plan.add(_decode(store.read_bytes(part_key(number))))
        plan.parts = number + 1
    return plan


def plan_shared(store: Store, plan: SharedPlan, pending: Sequence[PlannedPdf], *,
                pages_per_group: int, run: str) -> list[Group]:
    """The groups of `pending` PDFs (this run's, not committed), fixed in the shared plan.

    `plan` holds the parts read before the PDFs were counted; PDFs no part names are cut
    into groups and published as the next part (again after each part another run made
    first). A planned group is kept whole, the same for every run: its PDFs already
    committed are skipped when it runs, and the holder's outcome, which other runs read,
    then counts the same PDFs as theirs would.
    """
    by_uri = {pdf.uri: pdf for pdf in pending}
    for _ in range(MAX_ATTEMPTS):
        new = [pdf for pdf in pending if pdf.uri not in plan.group_of]
        cut = [(g.id, [by_uri[u] for u in g.uris]) for g in iter_groups(new, pages_per_group)]
        if not cut or store.create(part_key(plan.parts), encode_part(run, cut)):
            plan.add(cut)
            plan.parts += bool(cut)
            break
        read_parts(store, plan)
    else:
        raise StorageError(f"could not add to the shared plan in {store.uri}: "
                           f"{MAX_ATTEMPTS} other runs' parts came first")
    mine = {plan.group_of[pdf.uri] for pdf in pending}
    return [Group(gid, tuple(p.uri for p in pdfs), sum(p.weight for p in pdfs))
            for gid, pdfs in plan.groups.items() if gid in mine]


def _decode(data: bytes) -> Iterator[tuple[str, list[PlannedPdf]]]:
    part = json.loads(data)
    for group in part["groups"]:
        yield str(group["id"]), [PlannedPdf(str(uri), pages) for uri, pages in group["pdfs"]]


def encode_part(run: str, groups: Sequence[tuple[str, Sequence[PlannedPdf]]]) -> bytes:
    data = {"run": run, "groups": [{"id": gid, "pdfs": [[p.uri, p.pages] for p in pdfs]}
                                   for gid, pdfs in groups]}
    return json.dumps(data, separators=(",", ":")).encode("utf-8")
