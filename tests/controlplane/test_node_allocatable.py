"""`--cpu-node-allocatable` against a real kube-apiserver and kube-scheduler (1.37, with
DRANodeAllocatableResources and NodeDeclaredFeatures on): the CPU driver's devices say how many
node-allocatable `cpu` an allocation takes, and the scheduler counts a claim's CPUs against the
node's allocatable cpu, so a pod that asks for `cpu` besides cannot be placed on CPUs a claim
already holds. A node whose kubelet does not declare the feature makes the API server refuse
such a slice: the publisher then publishes the same devices without the mappings.

There is no kubelet: each Node's status (allocatable cpu, declared features) is written here as a
1.37 kubelet with the gate would write it. A separate control plane, since the shared one runs
without these gates.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import pytest
from topodra.common.device import Device
from topodra.common.kubeapi.slices import KubeSliceApi
from topodra.common.publisher import compare
from topodra.common.publisher.publisher import SlicePublisher
from topodra.common.synth import build, load_spec
from topodra.common.topology import discover
from topodra.drivers.cpu.devices import CAPACITY, build_devices
from topodra.drivers.cpu.options import CpuOptions

from tests.controlplane.cluster import ControlPlane, running_control_plane
from tests.controlplane.objects import device_class_body, eventually, pod_body

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]

DRIVER = "cpu.topodra.io"
GATES = {"DRANodeAllocatableResources": True, "NodeDeclaredFeatures": True}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    from tests.conftest import skip_or_fail
    from tests.controlplane.binaries import GoMissing

    try:
        with running_control_plane(Path(tmp_path_factory.mktemp("node-alloc")), feature_gates=GATES) as cp:
            k8s.ResourceV1Api(cp.admin).create_device_class(device_class_body("topodra-cpu", DRIVER))
            k8s.CoreV1Api(cp.admin).create_namespace({"metadata": {"name": "alloc"}})
            yield cp
    except GoMissing as e:
        skip_or_fail(str(e))


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("alloc-machine") / "m"
    build(load_spec("1s-4acc"), root)
    return root


def node(cp: ControlPlane, cpu: int, *, declares: bool) -> str:
    name = f"alloc-{uuid.uuid4().hex[:6]}"
    cp.create_node(name, cpu=str(cpu))
    if declares:
        declare(cp, name)
    return name


def declare(cp: ControlPlane, node_name: str) -> None:
    """What a 1.37 kubelet with the gate reports."""
    k8s.CoreV1Api(cp.admin).patch_node_status(
        node_name,
        {"status": {"declaredFeatures": ["DRANodeAllocatableResources"]}},
        _content_type="application/merge-patch+json",
    )


def publish(cp: ControlPlane, node_name: str, devices: list[Device]) -> SlicePublisher:
    pub = SlicePublisher(
        KubeSliceApi(cp.driver_client("cpu", node_name)), DRIVER, node_name, resync_delay=0.5
    )
    pub.set_devices(devices)
    pub.start()
    assert pub.wait_synced(30), pub.status()
    return pub


def claim(cp: ControlPlane, name: str, request: dict[str, Any]) -> None:
    k8s.ResourceV1Api(cp.admin).create_namespaced_resource_claim(
        "alloc",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {
                "devices": {
                    "requests": [{"name": "cpus", "exactly": {"deviceClassName": "topodra-cpu", **request}}]
                }
            },
        },
    )


def pod(cp: ControlPlane, name: str, node_name: str, *, claim_name: str = "", cpu: str = "") -> None:
    claims = [{"name": "cpus", "resourceClaimName": claim_name}] if claim_name else []
    body = pod_body(name, claims, {"kubernetes.io/hostname": node_name})
    if cpu:
        body["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu}
    k8s.CoreV1Api(cp.admin).create_namespaced_pod("alloc", body)


def scheduled(cp: ControlPlane, name: str) -> tuple[bool, str]:
    """(placed, the scheduler's message when not), once the scheduler has decided."""

    def decided() -> tuple[bool, str] | None:
        p = k8s.CoreV1Api(cp.admin).read_namespaced_pod(name, "alloc")
        for c in p.status.conditions or []:
            if c.type == "PodScheduled":
                return (c.status == "True", c.message or "")
        return None

    return eventually(f"the scheduler's decision on {name}", decided)


def test_a_claims_cpus_count_against_the_nodes_allocatable_cpu(cluster: ControlPlane, machine: Path) -> None:
    devices = build_devices(discover(machine), CpuOptions(granularity="core", node_allocatable=True))
    per_core = {int(d.node_allocatable["cpu"].device_multiplier or 0) for d in devices}
    assert len(per_core) == 1 and per_core != {0}, per_core  # every core the same size here
    two_cores = 2 * per_core.pop()
    n = node(cluster, two_cores, declares=True)
    pub = publish(cluster, n, devices)
    try:
        stored = {d["name"]: d for s in pub.published() for d in s["spec"]["devices"]}
        assert stored[devices[0].name]["nodeAllocatableResources"] == {
            "cpu": {"mapping": {"deviceMultiplier": str(two_cores // 2)}}
        }
        claim(cluster, f"{n}-two", {"count": 2})
        pod(cluster, f"{n}-claims", n, claim_name=f"{n}-two")
        assert scheduled(cluster, f"{n}-claims") == (True, "")
        # the claim's two cores are the node's whole allocatable cpu: nothing is left
        pod(cluster, f"{n}-asks", n, cpu="1")
        placed, why = scheduled(cluster, f"{n}-asks")
        assert not placed and "Insufficient cpu" in why, why
    finally:
        pub.stop()


def test_consumed_capacity_of_a_numa_device_counts_cpu_by_cpu(cluster: ControlPlane, machine: Path) -> None:
    devices = build_devices(discover(machine), CpuOptions(node_allocatable=True))
    assert all(d.node_allocatable["cpu"].capacity_key == CAPACITY for d in devices)
    n = node(cluster, 4, declares=True)
    pub = publish(cluster, n, devices)
    try:
        claim(cluster, f"{n}-three", {"capacity": {"requests": {CAPACITY: "3"}}})
        pod(cluster, f"{n}-claims", n, claim_name=f"{n}-three")
        assert scheduled(cluster, f"{n}-claims") == (True, "")
        pod(cluster, f"{n}-asks-two", n, cpu="2")  # 3 + 2 > 4
        placed, why = scheduled(cluster, f"{n}-asks-two")
        assert not placed and "Insufficient cpu" in why, why
        pod(cluster, f"{n}-asks-one", n, cpu="1")  # 3 + 1 = 4
        assert scheduled(cluster, f"{n}-asks-one") == (True, "")
    finally:
        pub.stop()


def test_a_node_that_does_not_declare_the_feature_gets_the_devices_without_mappings(
    cluster: ControlPlane, machine: Path
) -> None:
    devices = build_devices(discover(machine), CpuOptions(granularity="core", node_allocatable=True))
    n = node(cluster, 2, declares=False)
    pub = publish(cluster, n, devices)
    try:
        assert compare.NODE_ALLOCATABLE in pub.status().dropped_features
        stored = [d for s in pub.published() for d in s["spec"]["devices"]]
        assert {d["name"] for d in stored} == {d.name for d in devices}
        assert not any("nodeAllocatableResources" in d for d in stored)
        # as without the flag: the claim's cores are not counted, the pod's request is
        claim(cluster, f"{n}-two", {"count": 2})
        pod(cluster, f"{n}-claims", n, claim_name=f"{n}-two")
        assert scheduled(cluster, f"{n}-claims") == (True, "")
        pod(cluster, f"{n}-asks", n, cpu="1")
        assert scheduled(cluster, f"{n}-asks") == (True, "")
    finally:
        pub.stop()


def test_a_restart_after_the_kubelet_declares_the_feature_publishes_the_mappings(
    cluster: ControlPlane, machine: Path
) -> None:
    """The CPU README's promise: the driver that found the node not declaring the feature
    published without the mappings; once the node's kubelet declares it, the driver's next start
    publishes them over the slices it left (they lack the mappings because the node refused
    them, not because the API server drops them), and the scheduler then counts a claim's CPUs."""
    devices = build_devices(discover(machine), CpuOptions(granularity="core", node_allocatable=True))
    two_cores = 2 * int(devices[0].node_allocatable["cpu"].device_multiplier or 0)
    n = node(cluster, two_cores, declares=False)
    first = publish(cluster, n, devices)
    assert compare.NODE_ALLOCATABLE in first.status().dropped_features
    first.stop()
    declare(cluster, n)
    second = publish(cluster, n, devices)
    try:
        assert compare.NODE_ALLOCATABLE not in second.status().dropped_features
        stored = [d for s in second.published() for d in s["spec"]["devices"]]
        assert {d["name"] for d in stored} == {d.name for d in devices}
        assert all("nodeAllocatableResources" in d for d in stored)
        claim(cluster, f"{n}-two", {"count": 2})
        pod(cluster, f"{n}-claims", n, claim_name=f"{n}-two")
        assert scheduled(cluster, f"{n}-claims") == (True, "")
        pod(cluster, f"{n}-asks", n, cpu="1")  # the claim's two cores are the node's whole cpu
        placed, why = scheduled(cluster, f"{n}-asks")
        assert not placed and "Insufficient cpu" in why, why
    finally:
        second.stop()


def test_turning_the_flag_on_over_slices_published_without_it_publishes_the_mappings(
    cluster: ControlPlane, machine: Path
) -> None:
    """An upgrade that turns the flag on: the slices left by the driver before (without the
    mappings) must not be taken for an API server that drops them."""
    topo = discover(machine)
    n = node(cluster, 8, declares=True)
    before = publish(cluster, n, build_devices(topo, CpuOptions(granularity="core")))
    before.stop()
    after = publish(cluster, n, build_devices(topo, CpuOptions(granularity="core", node_allocatable=True)))
    try:
        assert compare.NODE_ALLOCATABLE not in after.status().dropped_features
        stored = [d for s in after.published() for d in s["spec"]["devices"]]
        assert stored and all("nodeAllocatableResources" in d for d in stored)
    finally:
        after.stop()
