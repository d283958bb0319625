"""End to end, nothing stood in: `topodra serve cpu` on this machine's sysfs publishes its NUMA
devices to a real kube-apiserver; the real scheduler allocates CPU counts from them for pods
(consumable capacity, share IDs); the kubelet test client prepares the claims over real gRPC;
podman + runc start containers with the resulting CDI specs, which run on the allocated CPUs.

Needs the control-plane tier (Go build, cached) and root podman; skipped elsewhere (CI fails).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import pytest
from topodra.common.topology import discover
from topodra.drivers.cpu import devices as layout
from topodra.drivers.cpu import pinning
from topodra.proto.dra_health.v1 import api_pb2 as health_pb

from tests.conftest import REPO
from tests.container.podman import busybox_image, run  # noqa: F401  (busybox_image is a fixture)
from tests.controlplane.cluster import ControlPlane, api_resource, unique_name
from tests.controlplane.objects import device_class_body, eventually, pod_body
from tests.kubelet.client import KubeletClient, watch_registry

pytestmark = [pytest.mark.controlplane, pytest.mark.container, pytest.mark.slow]
CDI_ROOT = Path("/var/run/cdi")


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="cpu-e2e-", dir="/tmp"))  # short: socket paths ≤ 108 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


def cpu_claim(
    name: str, device_class: str, cpus: str, config: dict[str, Any] | None = None
) -> dict[str, Any]:
    exactly = {"deviceClassName": device_class, "capacity": {"requests": {layout.CAPACITY: cpus}}}
    devices: dict[str, Any] = {"requests": [{"name": "cpus", "exactly": exactly}]}
    if config is not None:
        params = {"apiVersion": "cpu.topodra.io/v1alpha1", "kind": "CpuConfig", **config}
        devices["config"] = [
            {"requests": ["cpus"], "opaque": {"driver": layout.DRIVER, "parameters": params}}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": devices},
    }


def cpus_allowed(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stderr
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("Cpus_allowed_list:")]
    return line.split(":", 1)[1].strip()


def test_scheduler_allocation_to_pinned_container(
    control_plane: ControlPlane,
    busybox_image: str,  # noqa: F811
    workdir: Path,
) -> None:
    topo = discover("/")
    if len(topo.cpus_of_numa(0)) < 2:
        pytest.skip("needs NUMA node 0 with at least 2 CPUs")
    node = unique_name("cpu-node")
    control_plane.create_node(node)
    hooks = workdir / "hooks"
    pinning.install_hook(hooks)
    cmd = [sys.executable, "-m", "topodra.drivers.cli.main", "serve", "cpu", "--node-name", node]
    cmd += ["--kubelet-root-dir", str(workdir / "kubelet"), "--state-dir", str(workdir / "state")]
    cmd += ["--kubeconfig", str(control_plane.driver_kubeconfig("cpu", node)), "--cdi-root", str(CDI_ROOT)]
    cmd += ["--sysfs-root", "/", "--cpu-hook-dir", str(hooks)]
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True)
    dyn = control_plane.dynamic
    namespace = unique_name("cpu-e2e")
    claims: list[tuple[str, str, str]] = []
    kubelet = KubeletClient()
    try:
        (reg,) = eventually(
            "registration socket", lambda: watch_registry(workdir / "kubelet" / "plugins_registry")
        )
        kubelet.register(reg)
        slices = api_resource(dyn, "ResourceSlice")

        def published() -> dict[str, Any] | None:
            items = slices.get(field_selector=f"spec.nodeName={node},spec.driver={layout.DRIVER}").items
            found = {d["name"]: d for s in items for d in (s.to_dict()["spec"].get("devices") or [])}
            return found or None

        devices = eventually("the CPU driver's ResourceSlice", published)
        numa0 = devices["numa-0"]
        assert numa0["allowMultipleAllocations"] is True  # the server kept it: consumable capacity on
        assert numa0["capacity"][layout.CAPACITY]["value"] == str(len(topo.cpus_of_numa(0)))

        stream = kubelet.watch_health(timeout=30)
        first = next(iter(stream))
        health = {d.device.device_name: d.health for d in first.devices}
        stream.cancel()
        assert health["numa-0"] == health_pb.HEALTHY

        k8s.CoreV1Api(control_plane.admin).create_namespace(
            k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace))
        )
        device_class = unique_name("cpu-class")
        api_resource(dyn, "DeviceClass").create(body=device_class_body(device_class, layout.DRIVER))
        claim_api = api_resource(dyn, "ResourceClaim")
        pods = api_resource(dyn, "Pod", "v1")

        def schedule(name: str, cpus: str, config: dict[str, Any] | None = None) -> dict[str, Any]:
            claim_api.create(body=cpu_claim(name, device_class, cpus, config), namespace=namespace)
            pod = pod_body(
                f"{name}-pod", [{"name": "cpus", "resourceClaimName": name}], {"kubernetes.io/hostname": node}
            )
            pods.create(body=pod, namespace=namespace)

            def allocated() -> dict[str, Any] | None:
                obj = claim_api.get(name=name, namespace=namespace).to_dict()
                return obj if (obj.get("status") or {}).get("allocation") else None

            return eventually(f"the scheduler to allocate {name}", allocated, timeout=60)

        # claim 1: one CPU, and exactly CPU 1 (opaque config)
        one = schedule("pinned", "1", {"cpus": "1"})
        (result,) = one["status"]["allocation"]["devices"]["results"]
        assert (result["device"], result["pool"]) == ("numa-0", node)
        assert result["consumedCapacity"] == {layout.CAPACITY: "1"} and result["shareID"]
        # claim 2: one more CPU of the same device (capacity is shared, CPUs are not)
        two = schedule("second", "1")
        (result2,) = two["status"]["allocation"]["devices"]["results"]
        assert result2["device"] == "numa-0" and result2["shareID"] != result["shareID"]

        refs = [(namespace, o["metadata"]["name"], o["metadata"]["uid"]) for o in (one, two)]
        claims.extend(refs)
        answer = kubelet.prepare(refs)
        ids = {}
        for _ns, name, uid in refs:
            assert answer.claims[uid].error == "", answer.claims[uid].error
            (dev,) = answer.claims[uid].devices
            assert dev.device_name == "numa-0" and dev.share_id
            ids[name] = list(dev.cdi_device_ids)

        status = ["sh", "-c", "grep Cpus_allowed_list /proc/self/status"]
        assert cpus_allowed(run(busybox_image, status, devices=ids["pinned"])) == "1"
        assert cpus_allowed(run(busybox_image, status, devices=ids["second"])) == "0"

        assert kubelet.unprepare(refs[:1]).claims[refs[0][2]].error == ""
        assert not any(CDI_ROOT.glob(f"*{refs[0][2]}*"))
    finally:
        if claims:
            kubelet.unprepare(claims)
        kubelet.close()
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 0, err[-4000:]
