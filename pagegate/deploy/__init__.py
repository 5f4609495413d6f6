"""The files a deployment needs, shipped inside the package so the wheel has them too.

- `prefect.yaml`: the deployments (a link to the repository's own, which `prefect deploy`
  reads from a checkout); its entrypoints are module paths, so they load from an
  installed pagegate as well as from a checkout.
- `kubernetes-gpu.json`: the base job template of the `gpu-k8s` work pool: one GPU, its
  node selector and tolerations, /dev/shm in memory for vLLM, S3 credentials from a
  Secret, a grace period (docs/cluster.md, "Kubernetes").

`pagegate deploy-files DIR` writes both where `prefect deploy` and `prefect work-pool
create` can read them.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

FILES = ("prefect.yaml", "kubernetes-gpu.json")


def read(name: str) -> bytes:
    """One of FILES, from the installed package or the checkout."""
    if name not in FILES:
        raise KeyError(name)
    return resources.files(__name__).joinpath(name).read_bytes()


def write(folder: Path, *, overwrite: bool = False) -> list[Path]:
    """Write FILES into `folder`; an existing file is kept unless `overwrite`.

    Raises FileExistsError naming the first file that is there already.
    """
    targets = [folder / name for name in FILES]
    if not overwrite:
        for target in targets:
            if target.exists():
                raise FileExistsError(str(target))
    folder.mkdir(parents=True, exist_ok=True)
    for target in targets:
        target.write_bytes(read(target.name))
    return targets
