"""The deployments' parameters: the `gate` picker, block references, `pagegate blocks register`."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from typing import Any

import pytest
from prefect.utilities.callables import parameter_schema
from prefect.utilities.schema_tools.validation import validate

from pagegate.flows.ocr_pdfs import ocr_pdfs
from pagegate.flows.reprocess import reprocess
from pagegate.tasks.admission_block import AdmissionGate
from pagegate.tasks.gate_param import gate_block_name


def schema_of(flow: Any) -> dict[str, Any]:
    return parameter_schema(flow.fn).model_dump()


@pytest.mark.parametrize("flow", [ocr_pdfs, reprocess], ids=["ocr-pdfs", "reprocess"])
def test_gate_parameter_refers_to_the_block_type_so_the_ui_offers_a_picker(flow: Any) -> None:
    schema = schema_of(flow)
    options = schema["properties"]["gate"]["anyOf"]
    assert {"$ref": "#/definitions/AdmissionGate"} in options
    assert {"type": "string"} in options  # a name still works from the CLI
    assert schema["definitions"]["AdmissionGate"]["block_type_slug"] == "pagegate-admission-gate"


def test_a_picked_block_passes_the_servers_parameter_validation() -> None:
    values = {"sources": ["s3://b/in/"], "workspace": "s3://b/out",
              "gate": {"$ref": {"block_document_id": str(uuid.uuid4())}}}
    errors = validate(values, schema_of(ocr_pdfs), preprocess=True, ignore_required=True)
    assert [e.message for e in errors] == []


def test_gate_names_pass_through_and_unsaved_blocks_are_refused() -> None:
    assert gate_block_name(None) is None
    assert gate_block_name("") is None
    assert gate_block_name("small-gpu") == "small-gpu"
    with pytest.raises(ValueError, match="saved AdmissionGate"):
        gate_block_name(AdmissionGate(cooldown_seconds=3))


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_blocks_register_then_a_block_reference_reaches_the_flow_as_its_name() -> None:
    from prefect.settings import PREFECT_API_URL

    name = f"ui-pick-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    register = [sys.executable, "-m", "pagegate.cli", "blocks", "register", "--save-default", name]
    first = subprocess.run(register, capture_output=True, text=True, env=env, timeout=120)
    again = subprocess.run(register, capture_output=True, text=True, env=env, timeout=120)

    assert first.returncode == 0, first.stderr
    assert "registered block type 'pagegate Admission Gate'" in first.stdout
    assert f"saved AdmissionGate {name!r}" in first.stdout
    assert f"AdmissionGate {name!r} exists; left as it is" in again.stdout
    # What a worker does with the UI's pick before the flow starts: resolve the reference.
    params = ocr_pdfs.validate_parameters({
        "sources": ["s3://b/in/"], "workspace": "s3://b/out",
        "gate": {"$ref": {"block_document_slug": f"pagegate-admission-gate/{name}"}},
    })
    assert isinstance(params["gate"], AdmissionGate)
    assert gate_block_name(params["gate"]) == name
    assert params["gate"].to_config() == AdmissionGate().to_config()
