"""The CPU driver on a cluster without DRAConsumableCapacity (1.34/1.35 defaults), for real.

A separate kube-apiserver + scheduler with the gate off: the server drops allowMultipleAllocations
and the request policies of the NUMA devices; the publisher reports it, the driver says to use
core granularity; the scheduler then hands a NUMA device to one claim as a whole, and prepare
gives that claim every CPU of it. Core granularity publishes nothing that is dropped and the
scheduler allocates single cores. List attributes are rejected there too, and the driver says so.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import pytest
from topodra.common.cdi.spec import CdiWriter
from topodra.common.kubeapi.claims import KubeClaimSource
from topodra.common.kubeapi.slices import KubeSliceApi
from topodra.common.publisher.publisher import SlicePublisher
from topodra.common.runtime.checkpoint import Checkpoint
from topodra.common.runtime.claims import ClaimManager, cdi_kind
from topodra.common.runtime.driver import ClaimRef
from topodra.common.topology import discover
from topodra.drivers.cpu import devices as layout
from topodra.drivers.cpu.driver import CpuDriver
from topodra.drivers.cpu.options import CpuOptions

from tests.conftest import FixtureTrees
from tests.controlplane.cluster import ControlPlane, api_resource, running_control_plane, unique_name
from tests.controlplane.objects import device_class_body, eventually, pod_body
from tests.drivers.cpu.kit import expand, hook_dir
from tests.kit.claims import claim_body
from tests.kit.inventory import published_list

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]
TREE = "hwloc--32intel64-2p8co2t+8ve"  # 2 NUMA nodes of 8 SMT-2 cores


@pytest.fixture(scope="module")
def no_consumable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    from tests.conftest import skip_or_fail
    from tests.controlplane.binaries import GoMissing

    gates = {"DRAConsumableCapacity": False}
    try:
        with running_control_plane(Path(tmp_path_factory.mktemp("no-consumable")), feature_gates=gates) as cp:
            yield cp
    except GoMissing as e:
        skip_or_fail(str(e))


def publish(cp: ControlPlane, driver: CpuDriver, node: str) -> SlicePublisher:
    api = KubeSliceApi(cp.driver_client("cpu", node))
    pub = SlicePublisher(api, driver.name, node, resync_delay=0.5, on_status=driver.on_publisher_status)
    pub.set_devices(published_list(driver))
    pub.start()
    assert pub.wait_synced(30), pub.status()
    return pub


def schedule(cp: ControlPlane, namespace: str, device_class: str, node: str, name: str) -> None:
    claim = claim_body(name, device_class, request="cpus")
    api_resource(cp.dynamic, "ResourceClaim").create(body=claim, namespace=namespace)
    pod = pod_body(
        f"{name}-pod", [{"name": "cpus", "resourceClaimName": name}], {"kubernetes.io/hostname": node}
    )
    api_resource(cp.dynamic, "Pod", "v1").create(body=pod, namespace=namespace)


def allocation(cp: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    obj = api_resource(cp.dynamic, "ResourceClaim").get(name=name, namespace=namespace).to_dict()
    found: dict[str, Any] | None = (obj.get("status") or {}).get("allocation")
    return {"uid": obj["metadata"]["uid"], **found} if found else None


def unschedulable(cp: ControlPlane, namespace: str, pod: str) -> bool:
    obj = api_resource(cp.dynamic, "Pod", "v1").get(name=pod, namespace=namespace).to_dict()
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions)


@pytest.fixture
def namespace(no_consumable: ControlPlane) -> tuple[str, str]:
    ns = unique_name("cpu-gates")
    k8s.CoreV1Api(no_consumable.admin).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    device_class = unique_name("cpu-class")
    api_resource(no_consumable.dynamic, "DeviceClass").create(
        body=device_class_body(device_class, layout.DRIVER)
    )
    return ns, device_class


def test_numa_devices_are_whole_and_the_driver_advises_core_granularity(
    no_consumable: ControlPlane,
    namespace: tuple[str, str],
    fixture_trees: FixtureTrees,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cp, (ns, device_class) = no_consumable, namespace
    root = fixture_trees.root(TREE)
    driver = CpuDriver(discover(root), CpuOptions(hook_dir=hook_dir(tmp_path)), root)
    node = unique_name("numa-node")
    cp.create_node(node)
    caplog.set_level(logging.WARNING)
    pub = publish(cp, driver, node)
    try:
        assert "DRAConsumableCapacity" in pub.status().dropped_features
        # the publisher calls on_status after a successful sync, from its own thread
        eventually("the driver's advice", lambda: "--cpu-device-granularity core" in caplog.text)
        stored = {d["name"]: d for s in pub.published() for d in s["spec"]["devices"]}
        assert "allowMultipleAllocations" not in stored["numa-0"]
        assert "requestPolicy" not in stored["numa-0"]["capacity"][layout.CAPACITY]

        schedule(cp, ns, device_class, node, "whole")
        got = eventually(
            "the scheduler to allocate the claim", lambda: allocation(cp, ns, "whole"), timeout=60
        )
        (result,) = got["devices"]["results"]
        assert "consumedCapacity" not in result and "shareID" not in result

        source = KubeClaimSource(cp.driver_client("cpu", node))
        m = ClaimManager(
            driver,
            node,
            source,
            Checkpoint(tmp_path / "state", driver.name),
            CdiWriter(tmp_path / "cdi", cdi_kind(driver.name)),
        )
        m.start()
        ref = ClaimRef(ns, "whole", got["uid"])
        outcome = m.prepare([ref])[ref.uid]
        assert not outcome.error, outcome.error
        (held,) = driver.holdings()[ref.uid]
        assert held.device == result["device"] and held.cpus == driver.groups[result["device"]].cpus
        (spec_device,) = CdiWriter(tmp_path / "cdi", cdi_kind(driver.name)).read(ref.uid)["devices"]  # type: ignore[index]
        assert len(expand(spec_device["containerEdits"]["hooks"][0]["args"][1])) == 16

        # two NUMA devices, two whole-device claims at most: the third pod cannot be scheduled
        schedule(cp, ns, device_class, node, "other")
        eventually("the second claim", lambda: allocation(cp, ns, "other"), timeout=60)
        schedule(cp, ns, device_class, node, "third")
        assert eventually(
            "the third pod to be unschedulable", lambda: unschedulable(cp, ns, "third-pod"), timeout=60
        )
        assert m.unprepare([ref])[ref.uid] == ""
        m.close()
    finally:
        pub.stop()


def test_core_granularity_needs_no_consumable_capacity(
    no_consumable: ControlPlane, namespace: tuple[str, str], fixture_trees: FixtureTrees, tmp_path: Path
) -> None:
    cp, (ns, device_class) = no_consumable, namespace
    root = fixture_trees.root(TREE)
    driver = CpuDriver(discover(root), CpuOptions(granularity="core", hook_dir=hook_dir(tmp_path)), root)
    node = unique_name("core-node")
    cp.create_node(node)
    pub = publish(cp, driver, node)
    try:
        assert pub.status().dropped_features == ()
        assert pub.status().devices == 16
        schedule(cp, ns, device_class, node, "core")
        got = eventually("the scheduler to allocate a core", lambda: allocation(cp, ns, "core"), timeout=60)
        (result,) = got["devices"]["results"]
        assert result["device"].startswith("core-")
        source = KubeClaimSource(cp.driver_client("cpu", node))
        m = ClaimManager(
            driver,
            node,
            source,
            Checkpoint(tmp_path / "state", driver.name),
            CdiWriter(tmp_path / "cdi", cdi_kind(driver.name)),
        )
        m.start()
        ref = ClaimRef(ns, "core", got["uid"])
        assert not m.prepare([ref])[ref.uid].error
        (held,) = driver.holdings()[ref.uid]
        assert len(held.cpus) == 2 and held.cpus == driver.groups[result["device"]].cpus  # SMT siblings
        m.close()
    finally:
        pub.stop()


def test_list_attributes_rejected_and_explained(
    no_consumable: ControlPlane, fixture_trees: FixtureTrees, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cp = no_consumable
    root = fixture_trees.root(TREE)
    driver = CpuDriver(
        discover(root),
        CpuOptions(granularity="core", list_attributes=True, hook_dir=hook_dir(tmp_path)),
        root,
    )
    node = unique_name("list-node")
    cp.create_node(node)
    caplog.set_level(logging.WARNING)
    pub = publish(cp, driver, node)
    try:
        assert "DRAListTypeAttributes" in pub.status().dropped_features
        eventually("the driver's advice", lambda: "without --cpu-list-attributes" in caplog.text)
    finally:
        pub.stop()
