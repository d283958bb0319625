"""containerd as the real node's CRI runtime: its configuration, its process, `ctr` against it.

Everything containerd keeps lives under one folder (`root`, `state`, sockets, runc's state, the
CNI and NRI folders, CDI specs); the only path it insists on outside is the shims' socket folder
`/run/containerd/s`, which node.py cleans after the shims are gone.

Settings this machine needs (see hack/node/README.md):
- `restrict_oom_score_adj`: root here lacks CAP_SYS_RESOURCE, so the -998 the kubelet asks for a
  sandbox cannot be set; without this every sandbox fails to start.
- CDI on (always on in containerd 2.x) reading `cdi_spec_dirs`, NRI on with its socket in the
  run folder (an NRI plugin connects there), the sandbox image pinned so image GC keeps it.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.controlplane.processes import Component, wait_until
from tests.node.binaries import NodeBinaries

NAMESPACE = "k8s.io"  # the CRI plugin's containerd namespace: images the kubelet sees live here
SHIM_SOCKET_DIR = Path("/run/containerd/s")  # hard-coded in containerd's shim manager


@dataclass(frozen=True)
class ContainerdPaths:
    """Where containerd keeps what, all under `base`."""

    base: Path

    @property
    def socket(self) -> Path:
        return self.base / "containerd.sock"

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def state(self) -> Path:
        return self.base / "state"

    @property
    def runc_root(self) -> Path:
        return self.base / "runc"

    @property
    def config(self) -> Path:
        return self.base / "config.toml"

    @property
    def nri_socket(self) -> Path:
        return self.base / "nri" / "nri.sock"

    @property
    def nri_plugins(self) -> Path:
        return self.base / "nri" / "plugins"

    @property
    def nri_conf(self) -> Path:
        return self.base / "nri" / "conf.d"

    @property
    def log(self) -> Path:
        return self.base / "containerd.log"


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def render_config(
    paths: ContainerdPaths,
    binaries: NodeBinaries,
    *,
    cdi_dir: Path,
    cni_conf_dir: Path,
    sandbox_image: str,
) -> str:
    """containerd's config (format version 3) for the node."""
    s = _toml_str
    runtime = '[plugins."io.containerd.cri.v1.runtime"'
    lines = [
        "version = 3",
        f"root = {s(str(paths.root))}",
        f"state = {s(str(paths.state))}",
        "",
        "[grpc]",
        f"  address = {s(str(paths.socket))}",
        "[ttrpc]",
        f"  address = {s(str(paths.socket) + '.ttrpc')}",
        "[debug]",
        '  level = "info"',
        "",
        '[plugins."io.containerd.internal.v1.opt"]',
        f"  path = {s(str(paths.base / 'opt'))}",
        "",
        '[plugins."io.containerd.nri.v1.nri"]',
        "  disable = false",
        f"  socket_path = {s(str(paths.nri_socket))}",
        f"  plugin_path = {s(str(paths.nri_plugins))}",
        f"  plugin_config_path = {s(str(paths.nri_conf))}",
        "",
        f"{runtime}]",
        f"  cdi_spec_dirs = [{s(str(cdi_dir))}]",
        "  restrict_oom_score_adj = true",
        "  netns_mounts_under_state_dir = true",
        f"{runtime}.containerd]",
        '  default_runtime_name = "runc"',
        f"{runtime}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"{runtime}.containerd.runtimes.runc.options]",
        f"  BinaryName = {s(str(binaries.runc))}",
        "  SystemdCgroup = false",
        f"  Root = {s(str(paths.runc_root))}",
        f"{runtime}.cni]",
        f"  bin_dirs = [{s(str(binaries.cni_bin_dir))}]",
        f"  conf_dir = {s(str(cni_conf_dir))}",
        "",
        '[plugins."io.containerd.cri.v1.images".pinned_images]',
        f"  sandbox = {s(sandbox_image)}",
        "",
        '[plugins."io.containerd.grpc.v1.cri"]',
        '  stream_server_address = "127.0.0.1"',
        '  stream_server_port = "0"',
    ]
    return "\n".join(lines) + "\n"


class Containerd:
    """One containerd process for the node; `ctr()` runs ctr against it in the CRI namespace."""

    def __init__(self, paths: ContainerdPaths, binaries: NodeBinaries) -> None:
        self.paths = paths
        self.binaries = binaries
        self._proc = Component(
            "containerd",
            [str(binaries.containerd), "--config", str(paths.config)],
            paths.log,
        )

    @property
    def endpoint(self) -> str:
        """The CRI endpoint the kubelet is given."""
        return f"unix://{self.paths.socket}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc.running

    def write_config(self, *, cdi_dir: Path, cni_conf_dir: Path, sandbox_image: str) -> None:
        for d in (self.paths.base, self.paths.nri_plugins, self.paths.nri_conf):
            d.mkdir(parents=True, exist_ok=True)
        text = render_config(
            self.paths, self.binaries, cdi_dir=cdi_dir, cni_conf_dir=cni_conf_dir, sandbox_image=sandbox_image
        )
        self.paths.config.write_text(text)

    def start(self, timeout: float = 60.0) -> None:
        self._proc.start()
        wait_until(
            "containerd", lambda: self.ctr("version").returncode == 0, timeout, alive=self._proc.check_alive
        )

    def stop(self, grace: float = 10.0) -> None:
        """Stops containerd itself; the shims (and the containers) keep running, as on a real node."""
        self._proc.stop(grace=grace)

    def ctr(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        argv = [str(self.binaries.ctr), "--address", str(self.paths.socket), "--namespace", NAMESPACE, *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)

    def import_image(self, archive: Path) -> None:
        done = self.ctr("images", "import", "--all-platforms", str(archive), timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"ctr images import {archive} failed: {done.stderr.strip()}")

    def images(self) -> list[str]:
        done = self.ctr("images", "list", "--quiet")
        return done.stdout.split()

    def tail(self, lines: int = 60) -> str:
        return self._proc.tail(lines)
