"""Claims on the real kube-scheduler against nodes that carry the real drivers' slices of a
synthetic machine, with no kubelet: what the scheduler allocates is what such tests check.

`Node` creates the Node object and its ResourceSlices; `submit` creates a claim and a pod pinned
to the node and waits for the scheduler's verdict; `claim_namespace` is a namespace with the
DeviceClasses of deploy/base applied.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kubernetes.client as k8s

from hack.bench.sim import driver_devices, node_slices
from tests.controlplane.cluster import ControlPlane, api_resource, unique_name
from tests.controlplane.objects import pod_body

ACC, NIC = "accelerator.topodra.io", "nic.topodra.io"
REFUSED_FOR = 3.0  # seconds a "cannot allocate" verdict must stand to count as no room
DEVICE_CLASSES = Path(__file__).resolve().parents[2] / "deploy" / "base" / "deviceclasses.yaml"


class Node:
    """A simulated node carrying the slices the real drivers build for one machine."""

    def __init__(self, cp: ControlPlane, root: Path, prefix: str) -> None:
        self.cp, self.name = cp, unique_name(prefix)
        uid = cp.create_node(self.name)
        self.slices = node_slices(self.name, uid, driver_devices(root))
        api = api_resource(cp.dynamic, "ResourceSlice")
        for body in self.slices:
            api.create(body=body)
        self.attrs: dict[tuple[str, str], dict[str, Any]] = {}
        for s in self.slices:
            for d in s["spec"]["devices"]:
                flat = {k: next(iter(v.values())) for k, v in (d.get("attributes") or {}).items()}
                self.attrs[(s["spec"]["driver"], d["name"])] = flat

    def attr(self, result: dict[str, Any], key: str) -> Any:
        return self.attrs[(result["driver"], result["device"])].get(key)


@contextmanager
def claim_namespace(control_plane: ControlPlane, prefix: str) -> Iterator[str]:
    ns = unique_name(prefix)
    control_plane.apply_manifests([DEVICE_CLASSES])
    core = k8s.CoreV1Api(control_plane.admin)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    deadline = time.monotonic() + 60
    while not core.list_namespaced_service_account(ns).items:
        assert time.monotonic() < deadline, "no default ServiceAccount"
        time.sleep(0.2)
    yield ns
    core.delete_namespace(ns)


def submit(
    cp: ControlPlane, ns: str, node: Node | str, name: str, spec: dict[str, Any]
) -> list[dict[str, Any]] | None:
    """Creates the claim and a pod pinned to `node` (or the node of that name); returns the
    allocation results, or None when the scheduler reports that the claim does not fit."""
    node_name = node if isinstance(node, str) else node.name
    claims = api_resource(cp.dynamic, "ResourceClaim")
    pods = api_resource(cp.dynamic, "Pod", "v1")
    claims.create(namespace=ns, body={"metadata": {"name": name}, "spec": spec})
    claim = {"name": "devices", "resourceClaimName": name}
    pod = pod_body(name, [claim], {"kubernetes.io/hostname": node_name})
    pod["spec"]["terminationGracePeriodSeconds"] = 0  # no kubelet here to see a deleted pod off
    pods.create(namespace=ns, body=pod)
    deadline = time.monotonic() + 90
    last = ""
    refused_since: float | None = None
    while time.monotonic() < deadline:
        got = claims.get(namespace=ns, name=name).to_dict()
        alloc = (got.get("status") or {}).get("allocation")
        if alloc:
            results: list[dict[str, Any]] = alloc["devices"]["results"]
            return results
        p = pods.get(namespace=ns, name=name).to_dict()
        refused = False
        for c in (p.get("status") or {}).get("conditions") or []:
            message = c.get("message") or ""
            last = message or last
            refused |= c.get("type") == "PodScheduled" and "cannot allocate all claims" in message
            assert "timed out trying to allocate" not in message, f"{name}: {message}"
        # a verdict given before the scheduler saw a node's new slices is taken back when it
        # does (the slices' arrival requeues the pod): "no room" must hold for REFUSED_FOR
        now = time.monotonic()
        refused_since = (refused_since or now) if refused else None
        if refused_since is not None and now - refused_since >= REFUSED_FOR:
            return None
        time.sleep(0.2)
    raise AssertionError(f"{name}: no verdict from the scheduler in 90 s (last said: {last!r})")
