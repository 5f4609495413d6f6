"""`pagegate demo --profile NAME --layout`: the demo in another model's format, with
the layout sidecars it names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_the_demo_as_chandra_names_its_layout_sidecars(tmp_path: Path, api_env: dict[str, str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pagegate.cli", "demo", "--dir", str(tmp_path),
         "--profile", "chandra-2", "--layout"],
        env=api_env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "PDFs converted: 16," in proc.stdout
    assert "PDFs recorded in the failure ledger: 7" in proc.stdout
    layout_dir = tmp_path / "workspace" / "layout"
    assert f"Layout:      {layout_dir} " in proc.stdout
    docs = [json.loads(p.read_text()) for p in (tmp_path / "workspace" / "results").iterdir()]
    text_docs = [d for d in docs if "-text-" in d["metadata"]["Source-File"]]
    assert text_docs
    for doc in text_docs:
        assert doc["metadata"]["profile"] == "chandra-2"
        pages = [json.loads(line) for line in (layout_dir / f"{doc['id']}.jsonl").read_text().splitlines()]
        for page in pages:
            assert page["blocks"], page["page"]
            for block in page["blocks"]:
                assert block["text"] in doc["text"]
                x0, y0, x1, y1 = block["bbox"]
                assert 0 <= x0 < x1 <= page["width_pt"] and 0 <= y0 < y1 <= page["height_pt"]


def test_an_unknown_profile_is_refused_in_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pagegate.cli", "demo", "--dir", str(tmp_path), "--profile", "chandra"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert "unknown model profile 'chandra'" in proc.stderr
    assert not (tmp_path / "pdfs").exists()
