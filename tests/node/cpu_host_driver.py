"""The CPU driver as a process on the real node's host (`topodra serve cpu`), for tests that stop
and restart it at will, plus what they read back: the container logs with the kubelet's
timestamps, and the driver's /readyz and /metrics.

The driver reads the host's /sys, writes CDI specs where containerd reads them, installs its
hook into the node's hook folder, registers with the node's kubelet and connects to containerd's
NRI socket: the same parts as the DaemonSet, without the image (tests/node/drivers.py runs that).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
from kubernetes.client.exceptions import ApiException
from topodra.common.topology.parse import parse_cpulist
from topodra.drivers.cpu import pinning

from tests.conftest import REPO
from tests.controlplane.cluster import DRIVER_NAMESPACE, service_account
from tests.controlplane.objects import eventually
from tests.node import fixtures
from tests.node.drivers import bring_up, take_down
from tests.node.node import RealNode


@contextlib.contextmanager
def no_cpu_daemonset() -> Iterator[None]:
    """Without the tier's CPU DaemonSet (if an earlier module deployed it): one CPU driver per
    node, and one NRI plugin setting cpusets, or the runtime refuses containers two plugins
    adjust. Brought back afterwards."""
    drivers = fixtures._tier.drivers  # the session's DaemonSets, when some test asked for them
    if drivers is None or not drivers.pods("cpu"):
        yield
        return
    take_down(drivers, "cpu")
    try:
        yield
    finally:
        bring_up(drivers, "cpu")


def node_bound_kubeconfig(node: RealNode) -> Path:
    """The CPU driver's ServiceAccount with a token that names the node, as its DaemonSet pod's
    does. The token is bound to a pod of our own on the node (the kubelet runs it: busybox
    sleeping), labelled so that no DaemonSet adopts it; ControlPlane.driver_kubeconfig's stand-in
    pod carries the DaemonSet's labels, and once the tier's DaemonSets exist their controller
    takes it over and deletes it, which voids its token (401)."""
    assert node.busybox is not None
    sa = service_account("cpu")
    name = f"cpu-host-driver-{node.name}"
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "topodra-test-host-driver"}},
        "spec": {
            "nodeName": node.name,
            "serviceAccountName": sa,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "hold",
                    "image": node.busybox.name,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "86400"],
                }
            ],
        },
    }
    try:
        pod = node.core.create_namespaced_pod(DRIVER_NAMESPACE, body)
    except ApiException as e:
        if e.status != 409:
            raise
        pod = node.core.read_namespaced_pod(name, DRIVER_NAMESPACE)
    request = k8s.AuthenticationV1TokenRequest(
        spec=k8s.V1TokenRequestSpec(
            audiences=[],
            expiration_seconds=24 * 3600,
            bound_object_ref=k8s.V1BoundObjectReference(
                api_version="v1", kind="Pod", name=name, uid=pod.metadata.uid
            ),
        )
    )
    token = node.core.create_namespaced_service_account_token(sa, DRIVER_NAMESPACE, request).status.token
    path = node.run_dir / "cpu-host-driver.kubeconfig"
    node.cp.write_kubeconfig(path, sa, {"token": token})
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HostCpuDriver:
    def __init__(self, node: RealNode, *extra: str) -> None:
        self.node = node
        self.extra = list(extra)
        self.port = _free_port()
        self.log = node.run_dir / "cpu-driver.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.kubeconfig = node_bound_kubeconfig(node)

    def argv(self) -> list[str]:
        run = self.node.run_dir
        return [
            sys.executable, "-m", "topodra.drivers.cli.main", "serve", "cpu",
            "--node-name", self.node.name,
            "--kubelet-root-dir", str(self.node.kubelet.paths.root_dir),
            "--cdi-root", str(run / "cdi"),
            "--kubeconfig", str(self.kubeconfig),
            "--sysfs-root", "/",
            "--cpu-hook-dir", str(run / "hooks"),
            "--cpu-nri-socket", str(self.node.containerd.paths.nri_socket),
            "--metrics-address", f"127.0.0.1:{self.port}",
            *self.extra,
        ]  # fmt: skip

    def start(self, timeout: float = 60.0) -> None:
        pinning.install_hook(self.node.run_dir / "hooks")
        out = self.log.open("ab")
        self.proc = subprocess.Popen(self.argv(), cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the CPU driver exited with {self.proc.returncode}:\n{self.tail()}")
            code, _ = self.readyz()
            if code == 200:
                return
            time.sleep(0.3)
        raise TimeoutError(f"the CPU driver was not ready after {timeout:.0f} s:\n{self.tail()}")

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        assert self.proc.returncode == 0, f"the CPU driver exited with {self.proc.returncode}:\n{self.tail()}"

    def _get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as e:
            return int(e.code), e.read().decode()
        except OSError:
            return 0, ""

    def readyz(self) -> tuple[int, dict[str, Any]]:
        code, body = self._get("/readyz")
        with contextlib.suppress(ValueError):
            return code, json.loads(body)
        return code, {}

    def detail(self) -> dict[str, Any]:
        _, body = self.readyz()
        (driver,) = body["drivers"]
        return dict(driver["detail"])

    def metric(self, name: str, **labels: str) -> float | None:
        _, text = self._get("/metrics")
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in text.splitlines():
            if line.startswith(f"{name}{{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
            if not want and line.startswith(f"{name} "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def tail(self, lines: int = 60) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@contextlib.contextmanager
def in_nri_mode(node: RealNode) -> Iterator[HostCpuDriver]:
    """The host CPU driver, up and pinning through NRI, with the tier's CPU DaemonSet down
    meanwhile (one CPU driver and one cpuset-setting NRI plugin per node)."""
    with no_cpu_daemonset():
        d = HostCpuDriver(node)
        d.start()
        try:
            eventually("NRI mode", lambda: d.detail().get("pinning") == "nri", 30)
            yield d
        finally:
            d.stop()


@dataclass(frozen=True)
class Sample:
    at: datetime.datetime
    cpus: frozenset[int]


def _when(stamp: str) -> datetime.datetime:
    """The kubelet's RFC 3339 with nanoseconds, cut to what datetime holds."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    return datetime.datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00")


def cpu_samples(node: RealNode, namespace: str, pod: str, container: str) -> list[Sample]:
    """Every `Cpus_allowed_list:` line the container printed, with the time the runtime logged it."""
    out: list[Sample] = []
    for folder in sorted(node.kubelet.paths.pod_logs.glob(f"{namespace}_{pod}_*/{container}")):
        for f in sorted(folder.glob("*.log"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1):
            for line in f.read_text(errors="replace").splitlines():
                parts = line.split(" ", 3)
                if len(parts) != 4 or not parts[3].startswith("Cpus_allowed_list:"):
                    continue
                cpus = parse_cpulist(parts[3].split(":", 1)[1].strip())
                if cpus:
                    out.append(Sample(_when(parts[0]), frozenset(cpus)))
    return out


WATCH = "while true; do grep Cpus_allowed_list /proc/1/status; sleep 0.3; done"


def watcher(name: str, image: str, claims: Sequence[str] = ()) -> dict[str, Any]:
    """A container printing its (pid 1's) allowed CPUs three times a second."""
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", WATCH],
    }
    if claims:
        container["resources"] = {"claims": [{"name": c} for c in claims]}
    return container
