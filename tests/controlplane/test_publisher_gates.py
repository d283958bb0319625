"""The publisher on an API server with the DRA feature gates off that drop slice fields
(docs/design/resourceslices.md): taints, consumable capacity, partitionable devices; list
attributes (alpha, off by default in 1.37) fail the write instead. A separate control plane,
since the shared one has them on."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from topodra.common.device import Capacity, Device, RequestPolicy, Taint
from topodra.common.kubeapi.slices import KubeSliceApi
from topodra.common.publisher.publisher import SlicePublisher

from tests.controlplane.cluster import ControlPlane, running_control_plane

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]

GATES_OFF = {
    "DRADeviceTaints": False,
    "DRADeviceTaintRules": False,  # depends on DRADeviceTaints
    "DRAConsumableCapacity": False,
    "DRAPartitionableDevices": False,
}


@pytest.fixture(scope="module")
def gates_off(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    from tests.conftest import skip_or_fail
    from tests.controlplane.binaries import GoMissing

    try:
        with running_control_plane(Path(tmp_path_factory.mktemp("gates-off")), feature_gates=GATES_OFF) as cp:
            yield cp
    except GoMissing as e:
        skip_or_fail(str(e))


DEVICES = [
    Device(
        "vf-0",
        {"nic.topodra.io/pf": "pf0"},
        {"nic.topodra.io/bandwidth": Capacity("25G", RequestPolicy("1G", min="1G", step="1G"))},
        taints=(Taint("nic.topodra.io/link", "down"),),
        allow_multiple_allocations=True,
    ),
    Device("vf-1", {"resource.kubernetes.io/numaNode": (0, 1), "nic.topodra.io/pf": "pf0"}),
]


def test_dropped_fields_are_named_and_not_rewritten_even_across_restarts(gates_off: ControlPlane) -> None:
    cp = gates_off
    cp.create_node("gates-node")
    api = KubeSliceApi(cp.driver_client("nic", "gates-node"))
    pub = SlicePublisher(api, "nic.topodra.io", "gates-node", resync_delay=0.5)
    pub.set_devices(DEVICES)
    pub.start()
    try:
        assert pub.wait_synced(30), pub.status()
        assert set(pub.status().dropped_features) == {
            "DRAConsumableCapacity",
            "DRADeviceTaints",
            "DRAListTypeAttributes",
        }
        time.sleep(3)
        first = dict(api.writes)
        assert first == {"create": 1}  # the 422 was not a write
        devices = {d["name"]: d for s in pub.published() for d in s["spec"].get("devices", [])}
        assert devices["vf-0"] == {
            "name": "vf-0",
            "attributes": {"nic.topodra.io/pf": {"string": "pf0"}},
            "capacity": {"nic.topodra.io/bandwidth": {"value": "25G"}},
        }
        assert devices["vf-1"]["attributes"] == {"nic.topodra.io/pf": {"string": "pf0"}}
    finally:
        pub.stop()
    again = KubeSliceApi(cp.driver_client("nic", "gates-node"))
    restarted = SlicePublisher(again, "nic.topodra.io", "gates-node")
    restarted.set_devices(DEVICES)
    restarted.start()
    try:
        assert restarted.wait_synced(30)
        time.sleep(2)
        # consumable capacity is expected from the stored slice; taints and list attributes,
        # which a stored slice also lacks after a device turned unhealthy or a flag was turned
        # on, cost one probing write (the 422 of the lists is no write), then none
        assert dict(again.writes) == {"update": 1}
        assert set(restarted.status().dropped_features) == {
            "DRAConsumableCapacity",
            "DRADeviceTaints",
            "DRAListTypeAttributes",
        }
    finally:
        restarted.stop()
