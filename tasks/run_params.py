"""The parameters `ocr-pdfs` and `reprocess` share, and how they become the run's settings.

The flows keep flat parameters (the UI's run form stays simple, and Prefect builds it
from their signatures), with defaults read from RunConfig. Each flow hands them on as
one `RunParams`: every field is required, so mypy refuses a flow that forgets or
misspells one. `run_settings` then resolves what lives in Prefect (the password's
Secret block, the S3 credentials' prefect-aws block, the saved AdmissionGate, the flow
run's id) into a RunConfig and the gate's plain settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from prefect.blocks.system import Secret
from prefect.runtime import flow_run
from pydantic import Field, SecretStr

from pagegate.admission.build import GateSettings
from pagegate.config import RunConfig
from pagegate.io.s3 import S3Credentials
from pagegate.server.managed import ManagedServerConfig
from pagegate.server.target import node_server_url
from pagegate.tasks.admission_block import AdmissionGate
from pagegate.tasks.aws_credentials import load_s3_credentials
from pagegate.tasks.gate_param import gate_block_name, load_gate_settings, managed_server_for
from pagegate.tasks.preflight import named_block
from pagegate.vlm.profiles import choose_profile

# Ranges for the flows' parameters. Prefect validates a run's parameters with the
# pydantic model it builds from the signature, so a deployment run given
# `pages_per_group=0` ends Failed at once naming the parameter, before anything starts;
# the UI's form shows the bounds too. The CLI checks the same ranges on its flags.
AtLeastOne = Annotated[int, Field(ge=1)]
Share = Annotated[float, Field(ge=0.0, le=1.0)]
Seconds = Annotated[float, Field(ge=0.0)]
PositiveSeconds = Annotated[float, Field(gt=0.0)]


@dataclass(frozen=True)
class RunParams:
    """The shared flat flow parameters, as received (see flows/ocr_pdfs.py for each)."""

    workspace: str
    server_url: str | None
    model: str
    pages_per_group: int
    workers: int
    max_concurrent_requests: int
    markdown: bool
    target_longest_image_dim: int
    max_page_retries: int
    gate: AdmissionGate | str | None
    gate_enabled: bool
    gate_overrides: dict[str, Any] | None
    max_pages_per_pdf: int | None
    max_page_error_rate: float
    drop_on_page_errors: bool
    max_fallback_share: float
    pdf_password: SecretStr | None
    pdf_password_secret: str | None
    server_unavailable_after_seconds: float
    s3_retry_mode: str
    aws_credentials: str | None
    result_storage: str | None
    launch_server: dict[str, Any] | None
    server_urls: list[str] | None
    capacity_backoff_max_seconds: float
    render_workers: int | None
    pdf_memory_budget_mb: int
    profile: str | None
    layout: bool
    claim_lease_seconds: float

    def run_config(
        self,
        sources: Sequence[str],
        *,
        default_server_url: str,
        pdf_password: str | None,
        managed_server: ManagedServerConfig | None,
        run_id: str | None,
        run_name: str | None = None,
        redo_flagged: bool = False,
        s3_credentials: S3Credentials | None = None,
    ) -> RunConfig:
        """The RunConfig, given what `run_settings` resolved; no I/O."""
        return RunConfig(
            sources=tuple(sources),
            workspace=self.workspace,
            server_url=self.server_url or default_server_url,
            model=self.model,
            profile=choose_profile(
                self.profile, managed_server.vllm.model if managed_server else self.model
            ),
            layout=self.layout,
            pages_per_group=self.pages_per_group,
            workers=self.workers,
            max_concurrent_requests=self.max_concurrent_requests,
            markdown=self.markdown,
            target_longest_image_dim=self.target_longest_image_dim,
            max_page_retries=self.max_page_retries,
            gate_block=gate_block_name(self.gate),
            gate_overrides=dict(self.gate_overrides or {}),
            use_gate=self.gate_enabled,
            max_pages_per_pdf=self.max_pages_per_pdf,
            max_page_error_rate=self.max_page_error_rate,
            drop_on_page_errors=self.drop_on_page_errors,
            max_fallback_share=self.max_fallback_share,
            pdf_password=pdf_password,
            s3_credentials=s3_credentials,
            server_unavailable_after_seconds=self.server_unavailable_after_seconds,
            capacity_backoff_max_seconds=self.capacity_backoff_max_seconds,
            render_workers=self.render_workers,
            pdf_memory_budget_mb=self.pdf_memory_budget_mb,
            server_urls=tuple(self.server_urls or ()),
            s3_retry_mode=self.s3_retry_mode,
            redo_flagged=redo_flagged,
            run_id=run_id,
            run_name=run_name,
            claim_lease_seconds=self.claim_lease_seconds,
            managed_server=managed_server,
        )


async def run_settings(
    params: RunParams, *, sources: Sequence[str], redo_flagged: bool = False
) -> tuple[RunConfig, GateSettings]:
    """The run's RunConfig and its gate's settings (the defaults when the gate is off)."""
    gate_block = gate_block_name(params.gate)
    config = params.run_config(
        sources,
        default_server_url=node_server_url(),
        pdf_password=await resolve_password(params.pdf_password, params.pdf_password_secret),
        managed_server=await managed_server_for(params.launch_server, gate_block),
        run_id=flow_run.get_id(),
        run_name=flow_run.get_name(),
        redo_flagged=redo_flagged,
        s3_credentials=await load_s3_credentials(params.aws_credentials),
    )
    gate = await load_gate_settings(gate_block) if config.use_gate else GateSettings()
    return config, gate


async def resolve_password(password: SecretStr | None, secret_block: str | None) -> str | None:
    """The PDF password from the parameter or a Prefect Secret block; never logged."""
    if secret_block:
        with named_block("Secret", secret_block, "--pdf-password-secret"):
            block: Any = await Secret.aload(secret_block)
        if not isinstance(block, Secret):
            raise TypeError(f"block {secret_block!r} is not a Secret")
        return str(block.get())
    return password.get_secret_value() if password is not None else None
