"""The workspace's shared plan (pagegate.plan.shared): one group per PDF, whoever plans it."""

from __future__ import annotations

from pathlib import Path

from pagegate.io.local import LocalStore
from pagegate.output.workspace import Workspace
from pagegate.plan.groups import PlannedPdf, plan_groups
from pagegate.plan.pending import plan_pending
from pagegate.plan.shared import PLAN, SharedPlan, plan_shared, read_parts
from tests.helpers import write_corpus


def pdfs(first: int, last: int, pages: int = 2) -> list[PlannedPdf]:
    return [PlannedPdf(f"/in/d{i:03d}.pdf", pages) for i in range(first, last)]


def test_the_second_planner_of_the_same_pdfs_takes_the_first_ones_groups(tmp_path: Path) -> None:
    """Both counted the same PDFs; the first to publish fixes the groups, the second's
    part is refused and it adopts what it reads instead of adding a part."""
    store = LocalStore(tmp_path)
    early, late = SharedPlan(), SharedPlan()
    read_parts(store, late)  # the late planner read the (empty) plan before the first published
    first = plan_shared(store, early, pdfs(0, 10), pages_per_group=6, run="a")
    second = plan_shared(store, late, pdfs(0, 10), pages_per_group=6, run="b")
    assert first == second == plan_groups(pdfs(0, 10), 6)
    assert [i.key for i in store.list(PLAN)] == ["plan/00000000.json"]


def test_pdfs_no_part_names_get_groups_of_their_own_in_the_next_part(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    first = plan_shared(store, SharedPlan(), pdfs(0, 10), pages_per_group=6, run="a")
    # A later run lists five more PDFs; its cut differs from a fresh one over all 15.
    later = plan_shared(store, read_parts(store, SharedPlan()), pdfs(0, 15),
                        pages_per_group=6, run="b")
    assert later[: len(first)] == first
    assert later[len(first):] == plan_groups(pdfs(10, 15), 6)
    assert [i.key for i in store.list(PLAN)] == ["plan/00000000.json", "plan/00000001.json"]


def test_a_run_keeps_only_the_groups_of_the_pdfs_it_lists(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    everything = plan_shared(store, SharedPlan(), pdfs(0, 12), pages_per_group=6, run="a")
    some = plan_shared(store, read_parts(store, SharedPlan()), pdfs(3, 4), pages_per_group=6,
                       run="b")
    assert some == [everything[1]]  # d003's group, whole: d003, d004, d005


def test_groups_stay_the_same_after_some_pdfs_are_committed(tmp_path: Path) -> None:
    """The groups a run started later sees are those of the run it overlaps, though it
    plans when some PDFs are committed: a fresh cut of what is left would differ."""
    src = tmp_path / "in"
    write_corpus(src, 12, 2)
    workspace = Workspace(LocalStore(tmp_path / "ws"))
    first = plan_pending([str(src)], workspace=workspace, pages_per_group=6, s3_client=None,
                         shared_as="a")
    done = first.groups[0].uris[:2]
    for uri in done:
        workspace.commit_document(uri, {"id": uri, "text": "x"}, markdown=False)
    later = plan_pending([str(src)], workspace=workspace, pages_per_group=6, s3_client=None,
                         shared_as="b")
    assert later.groups == first.groups
    assert later.already_done == 0  # the two are counted as skipped when their group runs
    unshared = plan_pending([str(src)], workspace=workspace, pages_per_group=6, s3_client=None)
    assert unshared.groups[0] != first.groups[0] and unshared.already_done == 2
    assert first.mark is not None and later.mark is not None and later.mark >= first.mark
