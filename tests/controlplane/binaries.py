"""Finds (building on first use) the control-plane binaries through hack/controlplane/build.sh.

The script owns the versions and the cache; this module only runs it and reads back the paths,
so the fixture, benchmarks and a developer at a shell all share one cache.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "hack" / "controlplane" / "build.sh"

HOW_TO_RUN = (
    "install Go >= 1.26 (https://go.dev/dl), then run hack/controlplane/build.sh once "
    "(10-30 min and 3 GB of RAM on 2 cores, cached afterwards) and `pytest -m controlplane`"
)


class GoMissing(RuntimeError):
    """No Go toolchain on PATH: the tier cannot build its binaries here."""


class BuildFailed(RuntimeError):
    """build.sh ran and failed; the message carries the end of its output."""


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
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT)],
        stdout=subprocess.PIPE,
        stderr=None if echo else subprocess.PIPE,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stderr or "").splitlines()[-40:])
        raise BuildFailed(f"{BUILD_SCRIPT} exited {done.returncode}:\n{tail}")
    if done.stderr and echo is False:
        sys.stderr.write(done.stderr)
    dirs = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    k8s, etcd = Path(dirs["k8s"]), Path(dirs["etcd"])
    return Binaries(
        kube_apiserver=k8s / "kube-apiserver",
        kube_scheduler=k8s / "kube-scheduler",
        kube_controller_manager=k8s / "kube-controller-manager",
        etcd=etcd / "etcd",
    )
