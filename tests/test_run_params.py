"""The flows' flat parameters become a RunConfig through RunParams (tasks/run_params.py)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from pydantic import SecretStr

from pagegate.flows.ocr_pdfs import ocr_pdfs
from pagegate.flows.reprocess import reprocess
from pagegate.server.managed import managed_server_config
from pagegate.tasks.admission_block import AdmissionGate
from pagegate.tasks.run_params import RunParams

OWN = {"ocr-pdfs": {"sources"}, "reprocess": {"pdfs", "only_reasons"}}


@pytest.mark.parametrize(("name", "flow"), [("ocr-pdfs", ocr_pdfs), ("reprocess", reprocess)])
def test_run_params_are_exactly_the_flows_shared_parameters(name: str, flow: object) -> None:
    """A parameter added to a flow but not to RunParams would never reach the run."""
    parameters = set(inspect.signature(flow.fn).parameters)  # type: ignore[attr-defined]
    assert parameters - OWN[name] == {f.name for f in dataclasses.fields(RunParams)}


def params(**changes: object) -> RunParams:
    values: dict[str, object] = {
        "workspace": "s3://b/out", "server_url": None, "model": "olmocr",
        "pages_per_group": 50, "workers": 3, "max_concurrent_requests": 40, "markdown": True,
        "target_longest_image_dim": 1024, "max_page_retries": 2, "gate": "small-gpu",
        "gate_enabled": False, "gate_overrides": None, "max_pages_per_pdf": 900,
        "max_page_error_rate": 0.5, "drop_on_page_errors": True, "max_fallback_share": 0.75,
        "pdf_password": SecretStr("pw"), "pdf_password_secret": None,
        "server_unavailable_after_seconds": 12.0, "s3_retry_mode": "adaptive",
        "aws_credentials": None,
        "result_storage": None, "launch_server": None, "server_urls": None,
        "capacity_backoff_max_seconds": 3.0,
        "render_workers": 2, "pdf_memory_budget_mb": 64, "profile": None, "layout": True,
        "claim_lease_seconds": 9.0,
    }
    return RunParams(**{**values, **changes})  # type: ignore[arg-type]


def test_every_parameter_reaches_the_run_config() -> None:
    managed = managed_server_config({"model": "m"})
    config = params().run_config(
        ["a.pdf"], default_server_url="http://node:8000/v1", pdf_password="pw",
        managed_server=managed, run_id="r1", redo_flagged=True,
    )
    assert config.sources == ("a.pdf",)
    assert config.server_url == "http://node:8000/v1"  # empty: the node's server
    assert (config.pages_per_group, config.workers, config.max_concurrent_requests) == (50, 3, 40)
    assert (config.markdown, config.target_longest_image_dim, config.max_page_retries) == (
        True, 1024, 2)
    assert (config.gate_block, config.use_gate, config.gate_overrides) == ("small-gpu", False, {})
    assert (config.max_pages_per_pdf, config.max_page_error_rate, config.drop_on_page_errors) == (
        900, 0.5, True)
    assert (config.server_unavailable_after_seconds, config.capacity_backoff_max_seconds) == (
        12.0, 3.0)
    assert (config.s3_retry_mode, config.pdf_password, config.run_id) == ("adaptive", "pw", "r1")
    assert config.redo_flagged and config.managed_server is managed
    assert config.server_urls == ()
    assert (config.render_workers, config.pdf_memory_budget_mb) == (2, 64)
    assert (config.profile, config.layout) == ("olmocr-2", True)
    assert config.claim_lease_seconds == 9.0


@pytest.mark.parametrize(("profile", "model", "launched", "expected"), [
    (None, "olmocr", None, "olmocr-2"),                       # a served name naming no profile
    (None, "olmocr", "datalab-to/chandra-ocr-2", "chandra-2"),  # the launched model names it
    (None, "deepseek-ai/DeepSeek-OCR", None, "deepseek-ocr"),
    ("granite-docling", "datalab-to/chandra-ocr-2", None, "granite-docling"),  # given wins
])
def test_the_profile_is_given_or_named_by_the_model(
    profile: str | None, model: str, launched: str | None, expected: str
) -> None:
    managed = managed_server_config({"model": launched}) if launched else None
    config = params(profile=profile, model=model).run_config(
        ["a.pdf"], default_server_url="u", pdf_password=None, managed_server=managed, run_id=None
    )
    assert config.profile == expected


def test_given_servers_and_overrides_are_kept_and_an_unsaved_block_is_refused() -> None:
    config = params(server_url="http://x/v1", server_urls=["http://x/v1", "http://y/v1"],
                    gate_overrides={"cooldown_seconds": 2}).run_config(
        ["a.pdf"], default_server_url="unused", pdf_password=None, managed_server=None,
        run_id=None,
    )
    assert config.servers == ("http://x/v1", "http://y/v1")
    assert config.gate_overrides == {"cooldown_seconds": 2}
    with pytest.raises(ValueError, match="saved AdmissionGate"):
        params(gate=AdmissionGate(cooldown_seconds=3)).run_config(
            ["a.pdf"], default_server_url="u", pdf_password=None, managed_server=None, run_id=None
        )
