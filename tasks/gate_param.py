"""The flows' `gate` parameter: a saved AdmissionGate picked in the UI, or its name.

Annotated as `AdmissionGate | str | None`, the parameter's schema refers to the block
type, so Prefect's UI offers a picker of saved AdmissionGate documents, and the run
receives `{"$ref": {"block_document_id": ...}}`, which Prefect loads into the block
before the flow starts. The CLI and `prefect deployment run --param gate=NAME` keep
passing a plain name. Either way the flow hands on a name, and the saved document is
loaded here and handed to the library as plain settings (pagegate/admission/build.py),
which builds the live gate inside the flow's event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pagegate.admission.build import GateSettings, launch_config
from pagegate.server.managed import ManagedServerConfig
from pagegate.tasks.admission_block import AdmissionGate
from pagegate.tasks.preflight import named_block


def gate_block_name(gate: AdmissionGate | str | None) -> str | None:
    """The saved document's name; None for the defaults. An unsaved block is refused:
    its settings would be silently replaced by the defaults."""
    if gate is None or isinstance(gate, str):
        return gate or None
    name = gate._block_document_name
    if not name:
        raise ValueError(
            "gate: pass a saved AdmissionGate (AdmissionGate(...).save('name')) or its name; "
            "for one-off settings use gate_overrides"
        )
    return name


async def load_gate_block(name: str | None) -> AdmissionGate:
    """The saved block by name, or the defaults when no name is given."""
    if not name:
        return AdmissionGate()
    with named_block("AdmissionGate", name, "--gate"):
        block = await AdmissionGate.aload(name)
    if not isinstance(block, AdmissionGate):
        raise TypeError(f"block {name!r} is not an AdmissionGate")
    return block


async def load_gate_settings(name: str | None) -> GateSettings:
    """The saved block's gate settings as plain data (validated by its `to_config`)."""
    block = await load_gate_block(name)
    return GateSettings(config=block.to_config(), metrics_url=block.metrics_url)


async def managed_server_for(
    launch_server: Mapping[str, Any] | None, gate_block: str | None
) -> ManagedServerConfig | None:
    """The flow's `launch_server` as settings, with the AdmissionGate block's watchdog
    settings where launch_server leaves them unset; the block is read only to launch."""
    if not launch_server:
        return None
    block = await load_gate_block(gate_block)
    return launch_config(launch_server, block.supervision())
