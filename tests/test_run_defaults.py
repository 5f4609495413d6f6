"""Every default of a run is written once, in RunConfig (and PlannerConfig): nothing drifts.

The flows' signatures (Prefect builds the UI's run form from them), the CLI's options
(what Typer really uses: the click parameters), the library functions that take the
same settings, the benchmark harness and prefect.yaml's deployment parameters are each
compared with the config's field defaults. A parameter is compared when its name is a
config field, or says the same under another name (ALIASES, INVERTED); a None where the
field's default is an empty container means that default (EMPTY_IS_DEFAULT). The few
parameters whose empty value means something of its own are listed with the reason
(OWN_MEANING), and those that are no config setting at all, by group (NOT_CONFIG):
every parameter with a default must be one of the three, so an option renamed away from
its field fails. Each check also names parameters it must have compared (CORE).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

from pagegate.cli.app import app
from pagegate.config import PlannerConfig, RunConfig
from pagegate.flows.ocr_pdfs import ocr_pdfs
from pagegate.flows.planner import ocr_planner
from pagegate.flows.reprocess import reprocess
from pagegate.ocr.run import pool_settings
from pagegate.pdf.worker_process import PoolSettings
from pagegate.scale.plan import plan_shards

REPO = Path(__file__).resolve().parents[1]

ALIASES = {"gate": "gate_block", "gate_enabled": "use_gate"}
INVERTED = {"no_gate": "use_gate"}  # a flag that turns the field off
EMPTY_IS_DEFAULT = {"gate_overrides", "server_urls"}  # None: {} / ()
OWN_MEANING = {
    "server_url": "flows: empty is the node's own server, PAGEGATE_SERVER_URL (docs/cluster.md)",
    "model": "CLI: empty is the served name, or with no --server no launched server at all",
    "profile": "empty is the profile the model names, else RunConfig.profile (vlm.profiles.choose_profile)",
}
# Parameters that are no setting of the config: the check accounts for every parameter
# with a default, so an option renamed away from its field's name fails instead of
# escaping the comparison.
NOT_CONFIG = {
    # where a run's inputs, password and results come from, and what it prints
    "pdfs", "only_reasons", "only_reason", "pdf_password_secret", "result_storage", "json_out", "debug",
    # a prefect-aws block's name, resolved into RunConfig.s3_credentials (tasks/aws_credentials.py)
    "aws_credentials",
    # which server: --server is server_url/server_urls; launch settings whose empty value
    # is the launcher's own default (pagegate/server/settings.py, watchdog.py)
    "server", "launch_server", "vllm_command", "vllm_port", "served_model_name",
    "gpu_memory_utilization", "max_model_len", "tensor_parallel_size", "data_parallel_size",
    "max_num_seqs", "limit_mm_per_prompt", "vllm_arg", "hang_after", "restart_budget",
    "restart_refill", "gpus",
    # gate_overrides given one field at a time: empty is the AdmissionGate block's value
    "gate_peak_ratio", "gate_cooldown", "gate_max_in_flight",
    # the planner: further shard parameters; plan_shards' and pagegate plan's own switches
    "shard_parameters", "write_manifests", "dry_run",
}
CORE_RUN = {
    "pages_per_group", "workers", "markdown", "max_page_retries", "gate", "max_page_error_rate",
    "drop_on_page_errors", "max_pages_per_pdf", "server_unavailable_after_seconds",
    "s3_retry_mode",
}
# reprocess: empty is what the workspace's last run recorded (pagegate/output/options.py)
AS_RECORDED = {"markdown", "drop_on_page_errors"}
REPROCESS = {"flow reprocess", "pagegate reprocess"}
CORE_PLANNER = {"pages_per_shard", "pdfs_per_shard", "sample_size", "bytes_per_page"}


def field_defaults(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def signature_defaults(fn: Callable[..., Any]) -> dict[str, Any]:
    return {
        name: p.default for name, p in inspect.signature(fn).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def cli_defaults(command: str) -> dict[str, Any]:
    """The defaults Typer gives the command's options (required ones have none)."""
    group: Any = typer.main.get_command(app)
    return {p.name: p.default for p in group.commands[command].params if not p.required}


def compared(defaults: Mapping[str, Any], config: type) -> dict[str, tuple[Any, Any]]:
    """name -> (the parameter's default, the config's) for each parameter that is a field."""
    fields = field_defaults(config)
    pairs: dict[str, tuple[Any, Any]] = {}
    for name, default in defaults.items():
        if name in OWN_MEANING:
            continue
        field = INVERTED.get(name) or ALIASES.get(name, name)
        if field not in fields:
            continue
        expected = fields[field]
        if name in INVERTED:
            default = not default
        if default is None and field in EMPTY_IS_DEFAULT:
            default = type(expected)()
        pairs[name] = (default, expected)
    return pairs


RUN_ENTRY_POINTS: dict[str, Callable[[], dict[str, Any]]] = {
    "flow ocr-pdfs": lambda: signature_defaults(ocr_pdfs.fn),
    "flow reprocess": lambda: signature_defaults(reprocess.fn),
    "pagegate run": lambda: cli_defaults("run"),
    "pagegate reprocess": lambda: cli_defaults("reprocess"),
}
PLANNER_ENTRY_POINTS: dict[str, Callable[[], dict[str, Any]]] = {
    "flow ocr-planner": lambda: signature_defaults(ocr_planner.fn),
    "pagegate plan": lambda: cli_defaults("plan"),
    "plan_shards": lambda: signature_defaults(plan_shards),
}


def unaccounted(defaults: Mapping[str, Any], config: type) -> set[str]:
    return set(defaults) - set(compared(defaults, config)) - set(OWN_MEANING) - NOT_CONFIG


@pytest.mark.parametrize("where", RUN_ENTRY_POINTS)
def test_run_defaults_are_run_configs(where: str) -> None:
    defaults = RUN_ENTRY_POINTS[where]()
    core = CORE_RUN
    if where in REPROCESS:
        assert {n: defaults.get(n, "missing") for n in AS_RECORDED} == dict.fromkeys(AS_RECORDED)
        defaults = {n: d for n, d in defaults.items() if n not in AS_RECORDED}
        core = CORE_RUN - AS_RECORDED
    pairs = compared(defaults, RunConfig)
    assert {n: p for n, p in pairs.items() if p[0] != p[1]} == {}
    assert unaccounted(defaults, RunConfig) == set()
    assert set(pairs) >= core, f"{where} no longer has {sorted(core - set(pairs))}"


@pytest.mark.parametrize("where", PLANNER_ENTRY_POINTS)
def test_planner_defaults_are_planner_configs(where: str) -> None:
    defaults = PLANNER_ENTRY_POINTS[where]()
    pairs = compared(defaults, PlannerConfig)
    assert {n: p for n, p in pairs.items() if p[0] != p[1]} == {}
    assert unaccounted(defaults, PlannerConfig) == set()
    expected = CORE_PLANNER
    if where == "plan_shards":  # it takes the targets as target_pages / target_pdfs, required
        expected = {"sample_size", "sample_lookahead", "bytes_per_page"}
    assert expected <= set(pairs)


def test_the_planner_flow_compares_every_one_of_its_settings() -> None:
    pairs = compared(signature_defaults(ocr_planner.fn), PlannerConfig)
    assert set(pairs) == set(field_defaults(PlannerConfig))


def test_the_check_sees_a_drifted_default_an_alias_and_a_flag() -> None:
    def drifted(
        pages_per_group: int = 499, gate_enabled: bool = False, no_gate: bool = True,
        gate_overrides: dict[str, Any] | None = None, workers: int = RunConfig.workers,
    ) -> None: ...

    pairs = compared(signature_defaults(drifted), RunConfig)
    assert {n for n, (got, want) in pairs.items() if got != want} == {
        "pages_per_group", "gate_enabled", "no_gate"
    }
    assert pairs["gate_overrides"] == ({}, {})

    def renamed(server_unavailable_after: float = 1800.0) -> None: ...

    assert unaccounted(signature_defaults(renamed), RunConfig) == {"server_unavailable_after"}


def test_the_benchmark_harness_runs_on_the_production_defaults() -> None:
    from bench import harness

    assert RunConfig.max_page_retries == harness.MAX_PAGE_ATTEMPTS
    assert RunConfig.request_timeout_seconds == harness.REQUEST_TIMEOUT_S
    assert RunConfig.server_unavailable_after_seconds == harness.UNAVAILABLE_AFTER_S


def _deployments() -> list[dict[str, Any]]:
    return list(yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"])


@pytest.mark.parametrize("deployment", _deployments(), ids=lambda d: d["name"])
def test_prefect_yaml_sets_only_real_parameters_and_restates_no_default(
    deployment: dict[str, Any],
) -> None:
    """A deployment parameter equal to the flow's default would pin today's value when the
    default changes; one the flow does not have would be refused at run time."""
    path, name = deployment["entrypoint"].split(":")
    flow = getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), name)
    parameters = inspect.signature(flow.fn).parameters
    given = deployment.get("parameters") or {}
    assert set(given) <= set(parameters)
    restated = {
        k: v for k, v in given.items()
        if parameters[k].default is not inspect.Parameter.empty and parameters[k].default == v
    }
    assert restated == {}


def test_the_render_pool_on_its_own_defaults_to_what_a_run_asks_for() -> None:
    """Benchmarks and tests build PoolSettings() directly: they must get a run's pool."""
    assert PoolSettings() == pool_settings(RunConfig(sources=("pdfs",), workspace="ws"))
