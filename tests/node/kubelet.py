"""The real kubelet of the node: its configuration, credentials and process.

Its folders (root dir with the plugin registry and the DRA plugin folders, certificates, pod
logs, volume plugins) live under the run folder; `/var/lib/kubelet/device-plugins` and the log
symlinks in `/var/log/containers` are hard-coded in the kubelet and cleaned by node.py.
Its cgroups live under their own root (`cgroupRoot`), so teardown removes exactly them.

Settings this machine needs: `failCgroupV1: false` (the host is cgroup v1 hybrid),
`failSwapOn: false`, cgroupfs, eviction thresholds low enough for a shared disk, image GC that
never removes the imported images (no registry to pull them back from).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.controlplane.cluster import ControlPlane
from tests.controlplane.pki import KeyPair, node_client_certificate
from tests.controlplane.processes import Component, free_port, wait_until
from tests.node.binaries import NodeBinaries

CGROUP_ROOT = "/topodra-node"  # the kubelet's pods live under this cgroup in every hierarchy


@dataclass(frozen=True)
class KubeletPaths:
    base: Path

    @property
    def root_dir(self) -> Path:
        return self.base / "kubelet"

    @property
    def plugins_registry(self) -> Path:
        return self.root_dir / "plugins_registry"

    @property
    def plugins(self) -> Path:
        return self.root_dir / "plugins"

    @property
    def cert_dir(self) -> Path:
        return self.base / "kubelet-pki"

    @property
    def pod_logs(self) -> Path:
        return self.base / "podlogs"

    @property
    def config(self) -> Path:
        return self.base / "kubelet-config.yaml"

    @property
    def kubeconfig(self) -> Path:
        return self.base / "kubelet.kubeconfig"

    @property
    def log(self) -> Path:
        return self.base / "kubelet.log"


def kubelet_configuration(
    paths: KubeletPaths,
    *,
    node_ip: str,
    port: int,
    healthz_port: int,
    client_ca: Path,
    runtime_endpoint: str,
    feature_gates: dict[str, bool],
) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_ip,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": CGROUP_ROOT,
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": runtime_endpoint,
        "imageServiceEndpoint": runtime_endpoint,
        "podLogsDir": str(paths.pod_logs),
        "volumePluginDir": str(paths.root_dir / "volume-plugins"),
        "featureGates": feature_gates,
        # DRA CPU drivers need the kubelet's own CPU and memory managers out of the way.
        "cpuManagerPolicy": "none",
        "memoryManagerPolicy": "None",
        "topologyManagerPolicy": "none",
        "evictionHard": {
            "memory.available": "64Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "imageMinimumGCAge": "876000h",
        "resolvConf": "",
        "serializeImagePulls": False,
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
        "maxPods": 50,
        "shutdownGracePeriod": "0s",
    }


class Kubelet:
    """The kubelet process; `restart()` keeps its root dir and checkpoints, as a real restart does."""

    def __init__(self, paths: KubeletPaths, binaries: NodeBinaries, node_name: str, node_ip: str) -> None:
        self.paths = paths
        self.binaries = binaries
        self.node_name = node_name
        self.node_ip = node_ip
        self.port = free_port()
        self.healthz_port = free_port()
        self._proc: Component | None = None

    def configure(self, cp: ControlPlane, runtime_endpoint: str, verbosity: int = 2) -> None:
        for d in (self.paths.root_dir, self.paths.cert_dir, self.paths.pod_logs):
            d.mkdir(parents=True, exist_ok=True)
        cert: KeyPair = node_client_certificate(self.paths.cert_dir, cp.pki.ca, self.node_name)
        cp.write_kubeconfig(
            self.paths.kubeconfig,
            f"system:node:{self.node_name}",
            {"client-certificate": str(cert.cert), "client-key": str(cert.key)},
        )
        config = kubelet_configuration(
            self.paths,
            node_ip=self.node_ip,
            port=self.port,
            healthz_port=self.healthz_port,
            client_ca=cp.pki.ca.cert,
            runtime_endpoint=runtime_endpoint,
            feature_gates=cp.feature_gates,
        )
        self.paths.config.write_text(yaml.safe_dump(config, sort_keys=False))
        argv = [
            str(self.binaries.kubelet),
            f"--config={self.paths.config}",
            f"--kubeconfig={self.paths.kubeconfig}",
            f"--root-dir={self.paths.root_dir}",
            f"--cert-dir={self.paths.cert_dir}",
            f"--hostname-override={self.node_name}",
            f"--node-ip={self.node_ip}",
            f"--v={verbosity}",
        ]
        self._proc = Component("kubelet", argv, self.paths.log)

    @property
    def cpu_manager_state(self) -> Path:
        """The CPU manager's checkpoint; a policy change needs it gone (the kubelet refuses to
        start on one written under another policy)."""
        return self.paths.root_dir / "cpu_manager_state"

    def set_config(self, **changes: Any) -> None:
        """Rewrite keys of the configuration file (None removes one); read at the next start."""
        config = yaml.safe_load(self.paths.config.read_text())
        for key, value in changes.items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        self.paths.config.write_text(yaml.safe_dump(config, sort_keys=False))

    @property
    def process(self) -> Component:
        if self._proc is None:
            raise RuntimeError("kubelet not configured")
        return self._proc

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.running

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self, timeout: float = 60.0) -> None:
        import urllib.request

        self.process.start()

        def healthy() -> bool:
            url = f"http://127.0.0.1:{self.healthz_port}/healthz"
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.read() == b"ok")

        wait_until("kubelet /healthz", healthy, timeout, alive=self.process.check_alive)

    def stop(self, grace: float = 10.0) -> None:
        if self._proc is not None:
            self._proc.stop(grace=grace)

    def tail(self, lines: int = 60) -> str:
        return self._proc.tail(lines) if self._proc is not None else "--- kubelet: not configured"
