"""Rules of the source tree that a reviewer would otherwise have to remember.

- The packages are a stack: a package imports only from the packages below it. The
  order follows a page's way through the system, with the shared vocabulary at the
  bottom and the shells (CLI, Prefect tasks and flows) at the top. An import that runs
  back up, or sideways (hence no cycle), fails with the module and line that made it.
- A module stays short enough to read in one sitting, or says in its docstring why not.
- Nothing points at files outside the repository: a user's clone has only this tree.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Lowest first. Each entry is a layer; packages within one layer must not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("pagegate", "pagegate.errors", "pagegate.clock", "pagegate.settle", "pagegate.heap",
     "pagegate.deploy"),  # deploy: the deployment files the package carries
    ("pagegate.io",),
    ("pagegate.claims",),  # claims on groups in a workspace: the objects, the lease, the fence
    ("pagegate.pdf", "pagegate.vlm", "pagegate.samples"),
    ("pagegate.server",),
    ("pagegate.config",),
    ("pagegate.output",),
    ("pagegate.plan",),
    ("pagegate.admission",),
    ("pagegate.ocr",),
    ("pagegate.sim",),  # the simulator and the virtual world that runs the page path on it
    ("pagegate.report",),
    ("pagegate.scale",),
    ("pagegate.tasks",),  # the repository's tasks/ and flows/, installed as these (pagegate/*)
    ("pagegate.flows",),
    ("pagegate.cli",),
)
# The Prefect shells live in the repository's top-level folders; pagegate/tasks and
# pagegate/flows are links to them, so the checkout and the wheel import them by one name.
SHELLS = ("tasks", "flows")
RANK = {unit: rank for rank, layer in enumerate(LAYERS) for unit in layer}


def unit_of(module: str) -> str:
    """The layer unit a module belongs to: its package, or itself for a root module."""
    parts = module.split(".")
    if parts[0] != "pagegate":
        return parts[0]
    if len(parts) == 1:
        return "pagegate"
    return f"pagegate.{parts[1]}"


def module_name(path: Path) -> str:
    """The name a file is imported by: tasks/ and flows/ are `pagegate.tasks`, `pagegate.flows`."""
    parts = path.relative_to(REPO).with_suffix("").parts
    if parts[0] in SHELLS:
        parts = ("pagegate", *parts)
    return ".".join(parts).removesuffix(".__init__")


def imports_of(path: Path) -> list[tuple[str, int]]:
    """Every pagegate module (tasks and flows included) `path` imports, at any depth (lazy ones too)."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "pagegate":  # `from pagegate import samples, __version__`
                found += [
                    (f"pagegate.{a.name}" if (REPO / "pagegate" / f"{a.name}.py").exists()
                     else "pagegate", node.lineno)
                    for a in node.names
                ]
            else:
                found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
    return [(m, line) for m, line in found if m.split(".")[0] in ("pagegate", *SHELLS)]


def source_files() -> list[Path]:
    """Each file once: pagegate/ without its links to tasks/ and flows/, then those folders."""
    shells = [REPO / top for top in SHELLS]
    library = [p for p in (REPO / "pagegate").rglob("*.py")
               if not any(p.is_relative_to(REPO / "pagegate" / top) for top in SHELLS)]
    return sorted(library + [p for top in shells for p in top.rglob("*.py")])


def test_every_package_has_a_layer() -> None:
    units = {unit_of(module_name(path)) for path in source_files()}
    assert units - set(RANK) == set(), "add new packages to LAYERS"


def test_no_import_runs_back_up_or_sideways() -> None:
    wrong: list[str] = []
    for path in source_files():
        here = unit_of(module_name(path))
        for target, line in imports_of(path):
            there = unit_of(target)
            if there != here and RANK[there] >= RANK[here]:
                wrong.append(f"{path.relative_to(REPO)}:{line} ({here}) imports {target} ({there})")
    assert wrong == []


def test_the_shells_are_imported_under_pagegate_only() -> None:
    """A bare `tasks`/`flows` import works only in a checkout: installed, the wheel has
    only `pagegate` at the top (tests/test_wheel.py), so such an import would fail there."""
    for top in SHELLS:
        link = REPO / "pagegate" / top
        assert link.is_symlink() and link.resolve() == REPO / top, f"pagegate/{top} -> ../{top}"
    bare = [
        f"{path.relative_to(REPO)}:{line} imports {target}"
        for path in [*source_files(), *REPO.glob("tests/*.py"), *REPO.glob("bench/*.py")]
        for target, line in imports_of(path)
        if target.split(".")[0] in SHELLS
    ]
    assert bare == []


def test_the_layer_check_sees_a_wrong_import(tmp_path: Path) -> None:
    """The rules above would catch an upward import (guards against a check that sees nothing)."""
    here, there = unit_of("pagegate.io.storage"), unit_of("pagegate.ocr.job")
    assert RANK[there] > RANK[here]
    sample = tmp_path / "m.py"
    sample.write_text("def f():\n    from pagegate.ocr.job import process_pdf\n")
    assert imports_of(sample) == [("pagegate.ocr.job", 2)]


MAX_MODULE_LINES = 350
LONG_MODULE_NOTE = "Why one long module:"


def test_modules_are_short_or_say_why() -> None:
    long = []
    for path in source_files():
        text = path.read_text()
        lines = text.count("\n")
        says_why = LONG_MODULE_NOTE in (ast.get_docstring(ast.parse(text)) or "")
        if lines > MAX_MODULE_LINES and not says_why:
            long.append(f"{path.relative_to(REPO)}: {lines} lines")
    assert long == [], f"split these, or give the reason in a '{LONG_MODULE_NOTE}' paragraph"


# Names of the team's reference notes, which live outside the repository.
OUTSIDE = re.compile(r"shared[ /]notes|\.\./shared|\b(olmocr|peers-vllm|prefect|environment)\.md\b")


def test_nothing_refers_to_files_outside_the_repository() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    found = []
    for name in tracked:
        path = REPO / name
        if name == "tests/test_layout.py" or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{name}:{n}" for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert found == []
