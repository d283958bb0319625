"""Finds (building on first use) the control-plane binaries through hack/controlplane/build.sh.

The script owns the versions and the cache; this module only runs it and reads back the paths,
so the fixture, benchmarks and a developer at a shell all share one cache.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from tests.kit.build import BuildFailed, GoMissing, run_build_script

__all__ = ["BUILD_SCRIPT", "HOW_TO_RUN", "REPO", "Binaries", "BuildFailed", "GoMissing", "ensure_binaries"]

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "hack" / "controlplane" / "build.sh"

HOW_TO_RUN = (
    "install Go >= 1.26 (https://go.dev/dl), then run hack/controlplane/build.sh once "
    "(10-30 min and 3 GB of RAM on 2 cores, cached afterwards) and `pytest -m controlplane`"
)


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    kube_scheduler: Path
    kube_controller_manager: Path
    etcd: Path

    @property
    def k8s_version(self) -> str:
        """The version key of the cache folder, e.g. v1.37.2."""
        return self.kube_apiserver.parent.name.removeprefix("k8s-")


def ensure_binaries(*, echo: bool = False, timeout: float = 3600.0) -> Binaries:
    """Builds what is missing and returns the binaries. echo=True streams build progress to stderr."""
    if shutil.which("go") is None:
        raise GoMissing(f"Go is not installed: {HOW_TO_RUN}")
    dirs = run_build_script(BUILD_SCRIPT, echo=echo, timeout=timeout)
    k8s, etcd = Path(dirs["k8s"]), Path(dirs["etcd"])
    return Binaries(
        kube_apiserver=k8s / "kube-apiserver",
        kube_scheduler=k8s / "kube-scheduler",
        kube_controller_manager=k8s / "kube-controller-manager",
        etcd=etcd / "etcd",
    )
