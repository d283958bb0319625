"""status.devices[] with networkData and a Ready condition, written through resourceclaims/status.

The merge rules are checked as a pure function; the writes go to the real kube-apiserver of the
control-plane tier with the NIC driver's own ServiceAccount token bound to the claim's node
(deploy/base RBAC and granular status authorization), including a real 409 conflict.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from topodra.common.runtime.claimstatus import KubeClaimStatusWriter, merge
from topodra.common.runtime.driver import (
    AllocatedDevice,
    AllocatedDeviceStatus,
    ClaimStatusError,
    DeviceCondition,
    NetworkDeviceData,
    OpaqueConfig,
)
from topodra.common.runtime.statusqueue import QueuedStatusWriter
from topodra.drivers.nic.devices import DRIVER
from topodra.drivers.nic.driver import NicDriver, NicOptions

from tests.drivers.nic.conftest import GROUP, PLURAL, VERSION, SynthTree, allocated_claim, status_devices


def ready(reason: str = "Prepared") -> tuple[DeviceCondition, ...]:
    return (DeviceCondition("Ready", "True", reason, "ok"),)


# --- pure merge ------------------------------------------------------------------------------------


def test_merge_keeps_other_drivers_and_replaces_ours() -> None:
    other = {"driver": "cpu.topodra.io", "pool": "n", "device": "numa-0", "conditions": []}
    ours_old = {
        "driver": DRIVER,
        "pool": "n",
        "device": "pci-0000-3b-00-0",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Prepared",
                "message": "",
                "lastTransitionTime": "T0",
            }
        ],
    }
    upd = AllocatedDeviceStatus(
        "n",
        "pci-0000-3b-00-0",
        conditions=ready("Attached"),
        network_data=NetworkDeviceData("net1", "02:00:00:00:00:01", ("192.0.2.5/24",)),
    )
    new = merge([other, ours_old], DRIVER, [upd], [], now="T1", generation=3)
    assert new[0] == other
    assert new[1]["networkData"] == {
        "interfaceName": "net1",
        "hardwareAddress": "02:00:00:00:00:01",
        "ips": ["192.0.2.5/24"],
    }
    cond = new[1]["conditions"][0]
    assert cond["lastTransitionTime"] == "T0"  # status unchanged: the transition time stays
    assert cond["reason"] == "Attached" and cond["observedGeneration"] == 3
    flipped = merge(new, DRIVER, [AllocatedDeviceStatus("n", "pci-0000-3b-00-0", conditions=(
        DeviceCondition("Ready", "False", "LinkDown", "x"),))], [], now="T2")  # fmt: skip
    assert flipped[1]["conditions"][0]["lastTransitionTime"] == "T2"
    assert merge(new, DRIVER, [], [("n", "pci-0000-3b-00-0", None)], now="T3") == [other]


def test_merge_keys_on_share_id() -> None:
    a = AllocatedDeviceStatus("n", "d", share_id="11111111-1111-4111-8111-111111111111", conditions=ready())
    b = AllocatedDeviceStatus("n", "d", share_id="22222222-2222-4222-8222-222222222222", conditions=ready())
    both = merge([], DRIVER, [a, b], [], now="T")
    assert [e["shareID"] for e in both] == [a.share_id, b.share_id]
    assert merge(both, DRIVER, [], [("n", "d", a.share_id)], now="T") == [both[1]]


# --- real kube-apiserver -------------------------------------------------------------------------


@pytest.mark.controlplane
def test_driver_token_writes_network_data_and_ready(kube: tuple[Any, Any, str, str]) -> None:
    cp, admin, ns, node = kube
    dev = "pci-0000-3b-00-0"
    ref = allocated_claim(admin, ns, node, [(DRIVER, dev)])
    writer = KubeClaimStatusWriter(cp.driver_client("nic", node), DRIVER)
    entry = AllocatedDeviceStatus(
        node,
        dev,
        conditions=ready(),
        network_data=NetworkDeviceData("net1", "b8:3f:d2:00:00:01", ("192.0.2.9/24",)),
    )
    writer.set_devices(ref, [entry])
    (got,) = status_devices(admin, ref)
    assert (got["driver"], got["pool"], got["device"]) == (DRIVER, node, dev)
    assert got["networkData"] == {
        "interfaceName": "net1",
        "hardwareAddress": "b8:3f:d2:00:00:01",
        "ips": ["192.0.2.9/24"],
    }
    (cond,) = got["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Ready", "True", "Prepared")
    first = cond["lastTransitionTime"]
    writer.set_devices(ref, [entry])  # unchanged: no new transition
    assert status_devices(admin, ref)[0]["conditions"][0]["lastTransitionTime"] == first
    writer.remove_devices(ref, [(node, dev, None)])
    assert status_devices(admin, ref) == []


@pytest.mark.controlplane
def test_a_token_of_another_node_is_refused(kube: tuple[Any, Any, str, str]) -> None:
    cp, admin, ns, node = kube
    other = f"nic-other-{uuid.uuid4().hex[:6]}"
    cp.create_node(other)
    try:
        ref = allocated_claim(admin, ns, node, [(DRIVER, "pci-0000-3b-00-0")])
        writer = KubeClaimStatusWriter(cp.driver_client("nic", other), DRIVER)
        # granular status authorization answers with a Forbidden field error (HTTP 422)
        with pytest.raises(ClaimStatusError, match=r"resourceclaims/driver.*arbitrary-node:update"):
            writer.set_devices(ref, [AllocatedDeviceStatus(node, "pci-0000-3b-00-0", conditions=ready())])
        assert status_devices(admin, ref) == []
    finally:
        client.CoreV1Api(admin).delete_node(other)


@pytest.mark.controlplane
def test_a_concurrent_write_is_retried_and_both_entries_survive(kube: tuple[Any, Any, str, str]) -> None:
    """Between our GET and our update, another writer adds its entry: the server answers 409,
    we read again and write ours beside it."""
    cp, admin, ns, node = kube
    ref = allocated_claim(admin, ns, node, [(DRIVER, "pci-0000-3b-00-0"), ("gpu.example.com", "gpu-0")])
    writer = KubeClaimStatusWriter(cp.driver_client("nic", node), DRIVER)
    objs = client.CustomObjectsApi(admin)
    real_read = writer._api.read
    interfered: list[str] = []

    def get_then_someone_else_writes(namespace: str, name: str) -> Any:
        obj = real_read(namespace, name)
        if not interfered:
            cur: Any = objs.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, ref.name)
            cur["status"]["devices"] = [{"driver": "gpu.example.com", "pool": node, "device": "gpu-0"}]
            objs.replace_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, ref.name, cur)
            interfered.append(cur["metadata"]["resourceVersion"])
        return obj

    writer._api.read = get_then_someone_else_writes  # type: ignore[method-assign]
    writer.set_devices(ref, [AllocatedDeviceStatus(node, "pci-0000-3b-00-0", conditions=ready())])
    assert interfered
    got = status_devices(admin, ref)
    assert [(e["driver"], e["device"]) for e in got] == [
        ("gpu.example.com", "gpu-0"),
        (DRIVER, "pci-0000-3b-00-0"),
    ]


@pytest.mark.controlplane
def test_nic_driver_reports_its_devices_on_the_claim(
    kube: tuple[Any, Any, str, str], synth_machine: Callable[[str], SynthTree], tmp_path: Path
) -> None:
    """prepare -> networkData (pod-side name, MAC, configured IPs) + Ready; unprepare -> removed."""
    cp, admin, ns, node = kube
    root = tmp_path / "machine"
    shutil.copytree(synth_machine("1s-4acc").root, root, symlinks=True)
    dev = "pci-0000-02-00-1"
    mac = (root / "sys/class/net/eno2/address").read_text().strip()
    ref = allocated_claim(admin, ns, node, [(DRIVER, dev)])
    d = NicDriver(
        NicOptions(sysfs_root=str(root), node_name=node, hook_dir=tmp_path / "h", state_dir=tmp_path / "s")
    )
    status = QueuedStatusWriter(KubeClaimStatusWriter(cp.driver_client("nic", node), DRIVER))
    d.set_status_writer(status)
    cfg = OpaqueConfig(
        "FromClaim",
        (),
        {
            "apiVersion": "nic.topodra.io/v1alpha1",
            "kind": "NicConfig",
            "interfaceName": "net1",
            "ips": ["192.0.2.7/24"],
        },
    )
    prep = d.prepare(ref, [AllocatedDevice("nic", node, dev)], [cfg])
    assert status.flush(30)
    (got,) = status_devices(admin, ref)
    assert got["networkData"] == {"interfaceName": "net1", "hardwareAddress": mac, "ips": ["192.0.2.7/24"]}
    assert [(c["type"], c["status"], c["reason"]) for c in got["conditions"]] == [
        ("Ready", "True", "Prepared")
    ]
    d.unprepare(ref, prep)
    assert status.flush(30)
    assert status_devices(admin, ref) == []
