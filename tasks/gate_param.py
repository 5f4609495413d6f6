"""The flows' `gate` parameter: a saved AdmissionGate picked in the UI, or its name.

Annotated as `AdmissionGate | str | None`, the parameter's schema refers to the block
type, so Prefect's UI offers a picker of saved AdmissionGate documents, and the run
receives `{"$ref": {"block_document_id": ...}}`, which Prefect loads into the block
before the flow starts. The CLI and `prefect deployment run --param gate=NAME` keep
passing a plain name. Either way the flow hands on a name: the live gate is built from
the saved document inside the flow's event loop (tasks/admission_factory.py).
"""

from __future__ import annotations

from tasks.admission_block import AdmissionGate


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
