"""The `gpu-k8s` pool: prefect-kubernetes turns the shard-k8s deployment into a valid Job.

No cluster runs here. What a Kubernetes worker would do up to its API call is done for
real: the session's Prefect API takes the pool with pagegate's base job template
(`prefect work-pool create`, which checks the template) and the `shard-k8s` deployment
from prefect.yaml (`prefect deploy`), a flow run is created from the deployment, and
prefect-kubernetes' own job configuration (`resolve_for_flow_run`, the worker's first
step for a run) renders its Job manifest. The manifest is then checked field by field and
against Kubernetes' schema (kubernetes-validate), as the API server would before
creating the Job.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from pagegate import deploy
from tests.helpers import prefect_cli, prefect_env

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]

TEMPLATE = json.loads(deploy.read("kubernetes-gpu.json"))
IMAGE = "registry.example.com/ocr/pagegate-gpu:0.1.0"
# Each `kubernetes_validate` release carries schemas for a range of Kubernetes versions:
# the oldest and the newest of the installed one.
K8S_VERSIONS = (kubernetes_validate.utils.all_versions()[0], kubernetes_validate.utils.latest_version())


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], str]]:
    """(the Job manifest a worker would create for one shard-k8s run, the run's id)."""
    home = tmp_path_factory.mktemp("prefect-home")
    env = prefect_env(home)
    template = home / "kubernetes-gpu.json"
    template.write_bytes(deploy.read("kubernetes-gpu.json"))
    prefect_cli(env, "work-pool", "create", "gpu-k8s", "--type", "kubernetes",
                "--base-job-template", str(template), "--overwrite")
    out = prefect_cli(env, "deploy", "--name", "shard-k8s")
    assert "ocr-pdfs/shard-k8s" in out, out
    yield asyncio.run(render_one_run())


async def render_one_run() -> tuple[dict[str, Any], str]:
    from prefect.client.orchestration import get_client
    from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration

    async with get_client() as client:
        deployment = await client.read_deployment_by_name("ocr-pdfs/shard-k8s")
        flow_run = await client.create_flow_run_from_deployment(
            deployment.id,
            parameters={"sources": ["s3://corpus/ocr-out/shards/s1.txt"], "workspace": "s3://corpus/ocr-out"},
            job_variables={"image": IMAGE},  # what a run (or the deployment) sets for its registry
        )
        pool = await client.read_work_pool("gpu-k8s")
        config = await KubernetesWorkerJobConfiguration.resolve_for_flow_run(
            flow_run, client=client, work_pool=pool, worker_name="gpu-k8s-test", deployment=deployment
        )
    return config.job_manifest, str(flow_run.id)


def pod_spec(manifest: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = manifest["spec"]["template"]["spec"]
    return spec


def container(manifest: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod_spec(manifest)["containers"]
    found: dict[str, Any] = only
    return found


def test_the_job_runs_the_gpu_image_on_one_gpu_node(rendered: tuple[dict[str, Any], str]) -> None:
    manifest, _ = rendered
    assert manifest["kind"] == "Job" and manifest["apiVersion"] == "batch/v1"
    job = container(manifest)
    assert job["image"] == IMAGE
    assert job["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod_spec(manifest)["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod_spec(manifest)["tolerations"]
    assert job["securityContext"]["runAsNonRoot"] is True


def test_vllm_gets_an_in_memory_dev_shm(rendered: tuple[dict[str, Any], str]) -> None:
    manifest, _ = rendered
    volumes = {v["name"]: v for v in pod_spec(manifest)["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container(manifest)["volumeMounts"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}


def test_the_run_finds_its_flow_run_the_api_and_s3_credentials(rendered: tuple[dict[str, Any], str]) -> None:
    manifest, run_id = rendered
    job = container(manifest)
    env = {e["name"]: e.get("value") for e in job["env"]}
    assert env["PREFECT__FLOW_RUN_ID"] == run_id
    assert env["PREFECT_API_URL"].endswith("/api")
    assert env["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] == "30"  # the planner sees a lost node
    # backoffLimit 0: on a pod's SIGTERM Prefect puts the run back for another Job
    assert manifest["spec"]["backoffLimit"] == 0
    assert env["PREFECT_FLOW_RUN_EXECUTE_SIGTERM_BEHAVIOR"] == "reschedule"
    assert job["envFrom"] == [{"secretRef": {"name": "pagegate-s3"}}]
    assert not any(k.startswith("AWS_") for k in env)  # no credential is written into the Job


def test_tini_runs_first_and_passes_the_stop_on(rendered: tuple[dict[str, Any], str]) -> None:
    """`command` replaces the image's ENTRYPOINT (tini -- pagegate): tini stays first, and
    Prefect's own command for the run follows it (containers/Containerfile.gpu)."""
    manifest, _ = rendered
    job = container(manifest)
    assert job["command"] == ["/usr/bin/tini", "-s", "--"]
    assert job["args"] == ["prefect", "flow-run", "execute"]
    assert pod_spec(manifest)["terminationGracePeriodSeconds"] == 120
    assert pod_spec(manifest)["restartPolicy"] == "Never"


def without_prefect_extras(manifest: dict[str, Any]) -> dict[str, Any]:
    """prefect-kubernetes requires `parallelism` and `completions` in the pod spec of every
    template (its _get_base_job_manifest), where Kubernetes' schema has no such fields; the
    API server drops unknown fields with a warning. Strict validation takes them out."""
    bare = copy.deepcopy(manifest)
    for name in ("parallelism", "completions"):
        assert pod_spec(bare).pop(name) == 1
    return bare


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_manifest_passes_kubernetes_schema(rendered: tuple[dict[str, Any], str], version: str) -> None:
    manifest, _ = rendered
    assert kubernetes_validate.validate(manifest, version)
    assert kubernetes_validate.validate(without_prefect_extras(manifest), version, strict=True)


def test_the_schema_check_sees_a_wrong_manifest(rendered: tuple[dict[str, Any], str]) -> None:
    """Guards against a validation that passes anything: a GPU limit that is no quantity."""
    manifest, _ = rendered
    wrong = copy.deepcopy(manifest)
    container(wrong)["resources"]["limits"]["nvidia.com/gpu"] = {"count": 1}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong, K8S_VERSIONS[-1])


def test_the_template_keeps_every_variable_of_prefect_kubernetes_default() -> None:
    """It starts from `prefect work-pool get-default-base-job-template --type kubernetes`:
    a newer prefect-kubernetes that adds a variable shows up here, to be merged in."""
    from prefect_kubernetes.worker import KubernetesWorker

    default = KubernetesWorker.get_default_base_job_template()
    assert set(default["variables"]["properties"]) <= set(TEMPLATE["variables"]["properties"])
    assert set(default["job_configuration"]) == set(TEMPLATE["job_configuration"])


def test_deploy_files_writes_what_the_package_carries(tmp_path: Path) -> None:
    written = deploy.write(tmp_path)
    assert sorted(p.name for p in written) == sorted(deploy.FILES)
    assert json.loads((tmp_path / "kubernetes-gpu.json").read_text()) == TEMPLATE
    with pytest.raises(FileExistsError):
        deploy.write(tmp_path)
