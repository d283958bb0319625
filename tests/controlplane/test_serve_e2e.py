"""`topodra serve` as a process against the real kube-apiserver: the kubelet test client
registers it, prepares a claim the API server holds (claim GET with the driver's own
node-bound credentials), and its devices show up as ResourceSlices (the publisher wiring)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import pytest

from tests.conftest import REPO
from tests.controlplane.cluster import ControlPlane, unique_name
from tests.controlplane.processes import free_port
from tests.kubelet.client import KubeletClient, watch_registry

pytestmark = pytest.mark.controlplane
DRIVER = "cpu.topodra.io"


def wait_for(what: str, check: Any, proc: subprocess.Popen[str], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc.poll() is not None:
            raise AssertionError(f"serve exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def http(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="e2e-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_serve_registers_prepares_from_the_api_and_publishes(control_plane: ControlPlane, root: Path) -> None:
    node = unique_name("e2e-node")
    control_plane.create_node(node)
    kubeconfig = control_plane.driver_kubeconfig("cpu", node)
    port = free_port()
    cmd = [sys.executable, "-m", "tests.kubelet.serve_test_driver", "serve", "cpu"]
    cmd += ["--node-name", node, "--kubelet-root-dir", str(root), "--kubeconfig", str(kubeconfig)]
    cmd += ["--cdi-root", str(root / "cdi"), "--metrics-address", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        (reg,) = wait_for("registration socket", lambda: watch_registry(root / "plugins_registry"), proc)
        assert wait_for("metrics endpoint", lambda: http(port, "/healthz") == 200, proc)
        assert http(port, "/readyz") == 503
        admin: Any = k8s.ResourceV1Api(control_plane.admin)  # plain dicts in, as the API takes JSON
        namespace = unique_name("e2e")
        core: Any = k8s.CoreV1Api(control_plane.admin)
        core.create_namespace({"metadata": {"name": namespace}})
        name = unique_name("claim")
        made = admin.create_namespaced_resource_claim(
            namespace,
            {
                "metadata": {"name": name},
                "spec": {"devices": {"requests": [{"name": "cpus", "exactly": {"deviceClassName": "any"}}]}},
            },
        )
        assert made.metadata is not None and made.metadata.uid
        uid = made.metadata.uid
        allocation = {
            "devices": {"results": [{"request": "cpus", "driver": DRIVER, "pool": node, "device": "gpu-1"}]},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
        admin.patch_namespaced_resource_claim_status(name, namespace, {"status": {"allocation": allocation}})

        with KubeletClient() as kubelet:
            kubelet.register(reg)
            assert http(port, "/readyz") == 200
            missing = str(uuid.uuid4())
            answer = kubelet.prepare([(namespace, name, uid), (namespace, "missing", missing)])
            assert "not found" in answer.claims[missing].error
            (device,) = answer.claims[uid].devices
            assert (device.device_name, device.pool_name, list(device.request_names)) == (
                "gpu-1",
                node,
                ["cpus"],
            )
            (cdi_id,) = device.cdi_device_ids
            assert cdi_id.startswith(f"{DRIVER}/claim=") and uid in cdi_id
            assert list((root / "cdi").glob(f"*{uid}*"))
            assert kubelet.unprepare([(namespace, name, uid)]).claims[uid].error == ""

        def published() -> list[str]:
            slices = admin.list_resource_slice(field_selector=f"spec.nodeName={node},spec.driver={DRIVER}")
            return sorted(d.name for s in slices.items for d in (s.spec.devices or []))

        assert wait_for("ResourceSlices", published, proc) == ["gpu-0", "gpu-1", "gpu-2"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert watch_registry(root / "plugins_registry") == []
    stopped = [json.loads(x) for x in err.splitlines() if x.startswith("{") and '"plugin stopped"' in x]
    assert stopped and stopped[0]["driver"] == DRIVER
