"""The wheel: one top-level package, and a clean venv with only it runs pagegate.

The wheel is built as a user builds it (from the checkout's files, scripts/images) and
installed into a fresh venv from a local wheelhouse. Every command then runs in a
temporary folder with that venv alone on PATH, so nothing can come from the checkout:
`pagegate demo` (the 16 good samples converted, the 7 broken ones recorded), `pagegate
run` launching the simulator the wheel carries, and `prefect deploy --all` with the
deployment files the wheel carries (`pagegate deploy-files`).
"""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from pagegate import samples
from tests.helpers import REPO, prefect_env, read_results
from tests.wheels import build_wheelhouse, clean_venv, outside_env, the_wheel

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

RUN_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheelhouse(tmp_path_factory.mktemp("wheelhouse"))


@pytest.fixture(scope="module")
def venv_bin(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Path:
    return clean_venv(tmp_path_factory.mktemp("clean") / "venv", wheelhouse)


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def test_the_wheel_has_one_top_level_package(wheelhouse: Path) -> None:
    wheel = the_wheel(wheelhouse)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode().split() == ["pagegate"]
        carried = archive.read("pagegate/deploy/prefect.yaml")
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"pagegate"}
    # tasks/ and flows/ are in it, under pagegate; so are the deployment files
    for name in ("pagegate/flows/ocr_pdfs.py", "pagegate/flows/planner.py",
                 "pagegate/tasks/ocr_group.py", "pagegate/deploy/kubernetes-gpu.json"):
        assert name in names
    assert carried == (REPO / "prefect.yaml").read_bytes()


def test_only_pagegate_is_importable_from_the_venv(venv_bin: Path, tmp_path: Path) -> None:
    code = ("import importlib.util as u, pagegate, pagegate.flows.ocr_pdfs; "
            "print(pagegate.__file__); print(u.find_spec('flows'), u.find_spec('tasks'))")
    proc = run([str(venv_bin / "python"), "-c", code], tmp_path, outside_env(venv_bin))
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, shells = proc.stdout.splitlines()
    assert Path(where).is_relative_to(venv_bin.parent) and shells == "None None"


def test_the_demo_runs_from_the_wheel_alone(venv_bin: Path, tmp_path: Path) -> None:
    env = outside_env(venv_bin, PREFECT_HOME=str(tmp_path / "prefect-home"))
    proc = run([str(venv_bin / "pagegate"), "demo"], tmp_path, env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "PDFs converted: 16," in proc.stdout
    assert "PDFs recorded in the failure ledger: 7" in proc.stdout


def test_pagegate_run_launches_the_wheels_simulator(
    venv_bin: Path, tmp_path: Path, prefect_api: None
) -> None:
    src = tmp_path / "pdfs"
    src.mkdir()
    for i in range(3):
        (src / f"d{i}.pdf").write_bytes(samples.text_pdf(2, title=f"D{i}", seed=i))
    ws = tmp_path / "ws"
    env = outside_env(venv_bin, PREFECT_API_URL=prefect_env(tmp_path)["PREFECT_API_URL"])
    proc = run([str(venv_bin / "pagegate"), "run", str(src), "--workspace", str(ws), "--model", "olmocr",
                "--vllm-command", f"{venv_bin / 'python'} -m pagegate.sim"], tmp_path, env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert sorted(Path(s).name for s in read_results(ws)) == ["d0.pdf", "d1.pdf", "d2.pdf"]


def test_prefect_deploy_from_the_files_the_wheel_carries(
    venv_bin: Path, tmp_path: Path, prefect_api: None
) -> None:
    env = outside_env(venv_bin, **{k: v for k, v in prefect_env(tmp_path / "home").items()
                                   if k in ("PREFECT_API_URL", "PREFECT_HOME")}, PWD=str(tmp_path))
    prefect = [str(venv_bin / "prefect"), "--no-prompt"]
    for cmd in (
        [str(venv_bin / "pagegate"), "deploy-files", "."],
        [*prefect, "work-pool", "create", "gpu", "--type", "process", "--overwrite"],
        [*prefect, "work-pool", "create", "gpu-k8s", "--type", "kubernetes",
         "--base-job-template", "kubernetes-gpu.json", "--overwrite"],
    ):
        proc = run(cmd, tmp_path, env)
        assert proc.returncode == 0, f"{cmd}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    proc = run([*prefect, "deploy", "--all"], tmp_path, env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ("ocr-pdfs/nightly", "ocr-pdfs/shard", "ocr-pdfs/shard-k8s", "reprocess/reprocess",
                 "ocr-planner/planner"):
        assert name in proc.stdout, proc.stdout[-3000:]
    # nightly's schedule is active in prefect.yaml: paused in this shared test server, as
    # tests/test_deployment.py does, so no other test's `gpu` worker ever picks a run up.
    paused = run([*prefect, "deployment", "schedule", "pause", "--all"], tmp_path, env)
    assert paused.returncode == 0 and "nightly" in paused.stdout, paused.stderr[-2000:]
    again = run([str(venv_bin / "pagegate"), "deploy-files", "."], tmp_path, env)
    assert again.returncode == 2 and again.stderr.strip().endswith("exists; --force replaces it")
