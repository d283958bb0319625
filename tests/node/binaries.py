"""Finds (building on first use) what a real node runs, through hack/node/build.sh.

The script owns the versions and the cache (kubelet, containerd, ctr, the runc shim, the pause
program); this module runs it and adds the pieces Debian provides (runc, the CNI plugins,
busybox-static), so the fixture, hack/local-up.sh and a developer at a shell share one cache.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from tests.controlplane.binaries import REPO
from tests.kit.build import GoMissing, run_build_script

BUILD_SCRIPT = REPO / "hack" / "node" / "build.sh"
CNI_BIN_DIRS = (Path("/usr/lib/cni"), Path("/opt/cni/bin"))
DEBIAN_PACKAGES = "runc containernetworking-plugins busybox-static"


class HostToolMissing(RuntimeError):
    """A tool the node takes from the distribution is not installed."""


@dataclass(frozen=True)
class NodeBinaries:
    kubelet: Path
    containerd: Path
    ctr: Path
    shim: Path
    pause: Path
    runc: Path
    cni_bin_dir: Path
    busybox: Path

    @property
    def k8s_version(self) -> str:
        """The version key of the kubelet's cache folder, e.g. v1.37.2."""
        return self.kubelet.parent.name.removeprefix("kubelet-")

    @property
    def containerd_version(self) -> str:
        return self.containerd.parent.name.removeprefix("containerd-")


def _host_tools() -> tuple[Path, Path, Path]:
    runc = shutil.which("runc") or shutil.which("runc", path="/usr/sbin:/sbin")
    cni = next((d for d in CNI_BIN_DIRS if (d / "bridge").is_file() and (d / "host-local").is_file()), None)
    busybox = Path("/bin/busybox")
    found = {"runc": runc, "CNI bridge/host-local plugins": cni, "busybox": busybox.is_file()}
    missing = [name for name, there in found.items() if not there]
    if missing or runc is None or cni is None:
        raise HostToolMissing(
            f"{', '.join(missing)} not installed (Debian: apt-get install {DEBIAN_PACKAGES})"
        )
    return Path(runc), cni, busybox


def ensure_node_binaries(*, echo: bool = False, timeout: float = 3600.0) -> NodeBinaries:
    """Builds what is missing and returns every path. echo=True streams build progress to stderr.

    Raises GoMissing, HostToolMissing or BuildFailed with what to do about it.
    """
    if shutil.which("go") is None:
        raise GoMissing("Go is not installed: install Go >= 1.26 (https://go.dev/dl) to build the kubelet")
    runc, cni, busybox = _host_tools()
    paths = run_build_script(BUILD_SCRIPT, echo=echo, timeout=timeout)
    containerd = Path(paths["containerd"])
    return NodeBinaries(
        kubelet=Path(paths["kubelet"]),
        containerd=containerd / "containerd",
        ctr=containerd / "ctr",
        shim=containerd / "containerd-shim-runc-v2",
        pause=Path(paths["pause"]),
        runc=runc,
        cni_bin_dir=cni,
        busybox=busybox,
    )
