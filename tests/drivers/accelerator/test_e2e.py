"""End to end, nothing stood in: `topodra serve accelerator` on a synthetic machine publishes its
GPUs to a real kube-apiserver with the driver's node-bound credentials; the real scheduler
allocates two H100s that share a PCIe switch (matchAttribute on topology.topodra.io/pcieSwitch);
the kubelet test client prepares the claim over real gRPC; podman + runc start a container with
the resulting CDI ids, which sees the GPUs' nodes and addresses. A driver unbind in the tree then
shows up in the health stream and as a NoSchedule taint in the ResourceSlice on the server.

The machine's device nodes are real character devices under a temporary dev root (conftest).
Needs the control-plane tier (Go build, cached) and root podman; skipped elsewhere (CI fails).

Stand-in kept (the Python kubelet client, podman): the unhealthy-GPU taint needs
--accelerator-taint-unhealthy, which deploy/ does not set; the real kubelet + containerd path is
tests/node.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import pytest
from topodra.drivers.accelerator.devices import DRIVER
from topodra.proto.dra_health.v1 import api_pb2 as health_pb

from tests.conftest import REPO
from tests.container.podman import busybox_image, run  # noqa: F401  (busybox_image is a fixture)
from tests.controlplane.cluster import ControlPlane, api_resource, unique_name
from tests.controlplane.objects import device_class_body, eventually, pod_body
from tests.drivers.accelerator.conftest import fn_dir
from tests.kit.claims import claim_body
from tests.kubelet.client import KubeletClient, watch_registry

pytestmark = [pytest.mark.controlplane, pytest.mark.container, pytest.mark.slow]
CDI_ROOT = Path("/var/run/cdi")
H100S = {"pci-0000-0a-00-0", "pci-0000-0b-00-0", "pci-0000-0c-00-0"}  # gpu-box, behind one switch
MI210 = "pci-0000-01-00-0"


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="acc-e2e-", dir="/tmp"))  # short: socket paths ≤ 108 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


def two_gpus_on_one_switch(name: str, device_class: str) -> dict[str, Any]:
    nvidia = f'device.attributes["{DRIVER}"].kernelDriver == "nvidia"'
    body = claim_body(name, device_class, nvidia, request="gpus", count=2)
    body["spec"]["devices"]["constraints"] = [
        {"requests": ["gpus"], "matchAttribute": "topology.topodra.io/pcieSwitch"}
    ]
    return body


def test_scheduler_allocation_to_container_and_health_taint(
    control_plane: ControlPlane,
    busybox_image: str,  # noqa: F811
    tree: Callable[[str], Path],
    dev_root: Callable[[Path], Path],
    workdir: Path,
) -> None:
    root = tree("gpu-box")
    dev = dev_root(root)
    node = unique_name("acc-node")
    control_plane.create_node(node)
    cmd = [sys.executable, "-m", "topodra.drivers.cli.main", "serve", "accelerator", "--node-name", node]
    cmd += ["--kubelet-root-dir", str(workdir / "kubelet"), "--state-dir", str(workdir / "state")]
    cmd += ["--kubeconfig", str(control_plane.driver_kubeconfig("accelerator", node))]
    cmd += ["--cdi-root", str(CDI_ROOT), "--sysfs-root", str(root), "--accelerator-dev-root", str(dev)]
    cmd += ["--accelerator-taint-unhealthy", "--accelerator-rescan-interval", "1"]
    log = (workdir / "serve.log").open("w")  # a file, not a pipe: a full pipe would block the driver
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=log, text=True)
    dyn = control_plane.dynamic
    namespace = unique_name("acc-e2e")
    claims: list[tuple[str, str, str]] = []
    kubelet = KubeletClient()
    try:
        (reg,) = eventually(
            "registration socket", lambda: watch_registry(workdir / "kubelet" / "plugins_registry")
        )
        kubelet.register(reg)
        slices = api_resource(dyn, "ResourceSlice")

        def published() -> dict[str, Any] | None:
            items = slices.get(field_selector=f"spec.nodeName={node},spec.driver={DRIVER}").items
            found = {d["name"]: d for s in items for d in (s.to_dict()["spec"].get("devices") or [])}
            return found or None

        devices = eventually("the accelerator driver's ResourceSlice", published)
        assert set(devices) == H100S | {MI210, "pci-0000-06-00-0"}
        mi210 = devices[MI210]
        assert mi210["attributes"]["resource.kubernetes.io/pciBusID"] == {"string": "0000:01:00.0"}
        assert mi210["capacity"][f"{DRIVER}/memory"]["value"] == "68702699520"
        assert not mi210.get("taints")

        k8s.CoreV1Api(control_plane.admin).create_namespace(
            k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace))
        )
        device_class = unique_name("acc-class")
        api_resource(dyn, "DeviceClass").create(body=device_class_body(device_class, DRIVER))
        claim_api = api_resource(dyn, "ResourceClaim")
        pods = api_resource(dyn, "Pod", "v1")
        claim_api.create(body=two_gpus_on_one_switch("pair", device_class), namespace=namespace)
        pod = pod_body(
            "pair-pod", [{"name": "gpus", "resourceClaimName": "pair"}], {"kubernetes.io/hostname": node}
        )
        pods.create(body=pod, namespace=namespace)

        def allocated() -> dict[str, Any] | None:
            obj = claim_api.get(name="pair", namespace=namespace).to_dict()
            return obj if (obj.get("status") or {}).get("allocation") else None

        claim = eventually("the scheduler to allocate the pair", allocated, timeout=60)
        results = claim["status"]["allocation"]["devices"]["results"]
        chosen = {r["device"] for r in results}
        assert len(chosen) == 2 and chosen <= H100S and {r["pool"] for r in results} == {node}

        ref = (namespace, "pair", claim["metadata"]["uid"])
        claims.append(ref)
        answer = kubelet.prepare([ref])
        assert answer.claims[ref[2]].error == "", answer.claims[ref[2]].error
        ids = [i for d in answer.claims[ref[2]].devices for i in d.cdi_device_ids]
        show = "ls /dev/nvidia* /dev/dri; env | grep ^TOPODRA_ACCELERATORS="
        out = run(busybox_image, ["sh", "-c", show], devices=ids)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.split()
        assert "/dev/nvidiactl" in lines and sum(1 for x in lines if x.startswith("/dev/nvidia")) == 3
        addresses = {d.removeprefix("pci-").replace("-", ":", 2).replace("-", ".") for d in chosen}
        env = next(x for x in lines if x.startswith("TOPODRA_ACCELERATORS="))
        assert set(env.split("=", 1)[1].split(",")) == addresses

        # the unallocated MI210 loses its driver: unhealthy in the stream, tainted on the server
        (fn_dir(root, "0000:01:00.0") / "driver").unlink()

        def unhealthy() -> bool | None:
            stream = kubelet.watch_health(timeout=10)
            try:
                for msg in stream:
                    states = {d.device.device_name: d.health for d in msg.devices}
                    if states.get(MI210) == health_pb.UNHEALTHY:
                        return True
            except Exception:
                return None
            finally:
                stream.cancel()
            return None

        assert eventually("the health stream to report the unbound GPU", unhealthy, timeout=40)

        def tainted() -> list[dict[str, Any]] | None:
            found = published() or {}
            return (found.get(MI210) or {}).get("taints") or None

        taints = eventually("the taint on the server", tainted, timeout=40)
        assert [(t["key"], t.get("value"), t["effect"]) for t in taints] == [
            (f"{DRIVER}/unhealthy", "DriverUnbound", "NoSchedule")
        ]

        assert kubelet.unprepare([ref]).claims[ref[2]].error == ""
        claims.clear()
        assert not any(CDI_ROOT.glob(f"*{ref[2]}*"))
    finally:
        if claims:
            kubelet.unprepare(claims)
        kubelet.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    assert proc.returncode == 0, (workdir / "serve.log").read_text()[-4000:]
