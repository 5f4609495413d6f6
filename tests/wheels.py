"""The wheel and its wheelhouse, built as users and the images get them (scripts/images).

`build_wheelhouse(folder)` runs `scripts/images wheelhouse`: pagegate's wheel from a clean
copy of the checkout, its dependencies as wheels at the versions .venv has, and those
versions as constraints.txt. `clean_venv(...)` installs the wheel alone into a new venv
from there, with nothing from the network.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

BUILD_TIMEOUT_S = 600  # the first wheelhouse on a machine downloads about 130 MB


def build_wheelhouse(folder: Path) -> Path:
    """The folder, holding the wheel, its dependencies' wheels and constraints.txt."""
    proc = subprocess.run(
        [str(REPO / "scripts" / "images"), "wheelhouse", str(folder)],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, env={**os.environ, "PYTHON": sys.executable},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder


def the_wheel(wheelhouse: Path) -> Path:
    (wheel,) = wheelhouse.glob("pagegate-*.whl")
    return wheel


def clean_venv(venv: Path, wheelhouse: Path) -> Path:
    """A new venv with only the wheel (and what it depends on) installed; its bin folder."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index",
         "--find-links", str(wheelhouse), "-c", str(wheelhouse / "constraints.txt"),
         str(the_wheel(wheelhouse))],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return venv / "bin"


def outside_env(bin_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a user who has only the venv: no checkout on any path, no test API."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_API", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    return {**env, **extra}
