"""The ResourceSlice publisher against the real kube-apiserver, with a driver's own credentials
(ServiceAccount token bound to the node, so RBAC and the ValidatingAdmissionPolicy apply).

Writes are counted twice: by our API layer (`KubeSliceApi.writes`, what we sent and the server
accepted) and on the server (resourceVersions and names of the stored slices: any update,
create or delete changes them).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import kubernetes.client as k8s
import kubernetes_validate
import pytest
from topodra.common.device import Capacity, Device, RequestPolicy, Taint
from topodra.common.kubeapi.errors import ApiError
from topodra.common.kubeapi.slices import KubeSliceApi, WatchStream
from topodra.common.publisher.publisher import SlicePublisher

from tests.controlplane.cluster import ControlPlane, unique_name

pytestmark = pytest.mark.controlplane

CPU = "cpu.topodra.io"
NIC = "nic.topodra.io"


@dataclass
class Node:
    name: str
    uid: str


@pytest.fixture
def node(control_plane: ControlPlane) -> Node:
    name = unique_name("pub")
    return Node(name, control_plane.create_node(name))


@pytest.fixture
def publishers() -> Iterator[list[SlicePublisher]]:
    made: list[SlicePublisher] = []
    yield made
    for p in made:
        p.stop()


def cpus(n: int) -> list[Device]:
    return [
        Device(
            f"cpu-{i}",
            {
                "resource.kubernetes.io/numaNode": i * 2 // n,
                "cpu.topodra.io/core": i // 2,
                "cpu.topodra.io/smt": i % 2,
            },
        )
        for i in range(n)
    ]


def vfs(n: int) -> list[Device]:
    """300 VFs over 4 PFs; every 10th link is down (tainted), so every slice is limited to 64."""
    out = []
    for i in range(n):
        taints = (Taint("nic.topodra.io/link", "down", "NoSchedule"),) if i % 10 == 9 else ()
        bdf = f"0000:{0x3B + i // 75:02x}:{i % 75 // 8 + 1:02x}.{i % 8}"
        out.append(
            Device(
                f"pf{i // 75}-vf{i % 75}",
                {
                    "resource.kubernetes.io/pciBusID": bdf,
                    "resource.kubernetes.io/pcieRoot": f"pci0000:{0x3A + i // 150:02x}",
                    "nic.topodra.io/pf": f"pf{i // 75}",
                },
                {"nic.topodra.io/bandwidth": Capacity("25G", RequestPolicy("1G", min="1G", step="1G"))},
                taints=taints,
                allow_multiple_allocations=True,
            )
        )
    return out


def publisher(
    cp: ControlPlane,
    node: Node,
    devices: list[Device],
    made: list[SlicePublisher],
    kind: str = "cpu",
    **kw: Any,
) -> SlicePublisher:
    kw.setdefault("resync_delay", 1.0)
    pub = SlicePublisher(
        KubeSliceApi(cp.driver_client(kind, node.name)), f"{kind}.topodra.io", node.name, **kw
    )
    made.append(pub)
    pub.set_devices(devices)
    pub.start()
    return pub


def stored(cp: ControlPlane, driver: str, node: str) -> list[dict[str, Any]]:
    api = KubeSliceApi(cp.api_client())
    items, _ = api.list_slices(f"spec.driver={driver},spec.nodeName={node}")
    return sorted(items, key=lambda o: o["metadata"]["name"])


def fingerprint(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(o["metadata"]["name"], o["metadata"]["resourceVersion"]) for o in items]


def device_names(items: list[dict[str, Any]]) -> list[str]:
    return [d["name"] for o in items for d in o["spec"].get("devices", [])]


def writes(pub: SlicePublisher) -> dict[str, int]:
    assert isinstance(pub.api, KubeSliceApi)
    return dict(pub.api.writes)


def test_create_publishes_node_owned_slices_the_schema_accepts(
    control_plane: ControlPlane, node: Node, publishers: list[SlicePublisher]
) -> None:
    pub = publisher(control_plane, node, cpus(8), publishers)
    assert pub.wait_synced(30), pub.status()
    (obj,) = stored(control_plane, CPU, node.name)
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid, "controller": True}
    ]
    assert obj["metadata"]["name"].startswith(f"00000-{CPU}-{node.name}-")
    assert obj["spec"]["pool"] == {"name": node.name, "generation": 1, "resourceSliceCount": 1}
    assert device_names([obj]) == [f"cpu-{i}" for i in range(8)]
    assert writes(pub) == {"create": 1}
    for version in ("1.34.0", "1.37.0"):
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "spec": obj["spec"]}
        kubernetes_validate.validate(body, version, strict=True)


def test_restart_adopts_the_stored_slices_with_zero_writes(
    control_plane: ControlPlane, node: Node, publishers: list[SlicePublisher]
) -> None:
    devices = vfs(300)  # taints (server adds timeAdded), quantities, request policies
    first = publisher(control_plane, node, devices, publishers, kind="nic")
    assert first.wait_synced(30), first.status()
    first.stop()
    before = fingerprint(stored(control_plane, NIC, node.name))
    second = publisher(control_plane, node, devices, publishers, kind="nic")
    assert second.wait_synced(30), second.status()
    time.sleep(2)
    assert writes(second) == {}
    assert fingerprint(stored(control_plane, NIC, node.name)) == before


def test_one_changed_device_rewrites_one_slice(
    control_plane: ControlPlane, node: Node, publishers: list[SlicePublisher]
) -> None:
    devices = cpus(256)
    pub = publisher(control_plane, node, devices, publishers)
    assert pub.wait_synced(30), pub.status()
    before = stored(control_plane, CPU, node.name)
    assert [len(o["spec"]["devices"]) for o in before] == [128, 128]
    devices[200] = Device("cpu-200", {"cpu.topodra.io/core": 100, "cpu.topodra.io/offline": True})
    pub.set_devices(devices)
    assert pub.wait_synced(30), pub.status()
    after = stored(control_plane, CPU, node.name)
    assert writes(pub) == {"create": 2, "update": 1}
    assert after[0]["metadata"]["resourceVersion"] == before[0]["metadata"]["resourceVersion"]
    assert [o["spec"]["pool"]["generation"] for o in after] == [1, 1]
    assert after[1]["spec"]["devices"][200 - 128]["attributes"]["cpu.topodra.io/offline"] == {"bool": True}


def test_a_300_vf_node_is_chunked_at_64_and_a_256_cpu_node_at_128(
    control_plane: ControlPlane, publishers: list[SlicePublisher]
) -> None:
    big = Node(unique_name("pub-big"), "")
    big.uid = control_plane.create_node(big.name)
    nic = publisher(control_plane, big, vfs(300), publishers, kind="nic")
    cpu = publisher(control_plane, big, cpus(256), publishers, kind="cpu")
    assert nic.wait_synced(30) and cpu.wait_synced(30), (nic.status(), cpu.status())
    nic_slices, cpu_slices = stored(control_plane, NIC, big.name), stored(control_plane, CPU, big.name)
    assert [len(o["spec"]["devices"]) for o in nic_slices] == [64, 64, 64, 64, 44]
    assert [len(o["spec"]["devices"]) for o in cpu_slices] == [128, 128]
    assert device_names(nic_slices) == [d.name for d in vfs(300)]
    assert {o["spec"]["pool"]["resourceSliceCount"] for o in nic_slices} == {5}
    tainted = [d for o in nic_slices for d in o["spec"]["devices"] if d.get("taints")]
    assert len(tainted) == 30 and all(d["taints"][0].get("timeAdded") for d in tainted)


class ConflictingApi(KubeSliceApi):
    """Our real API layer, but before our first update another client (the admin) edits the same
    slice, so the server answers our update with a real 409 Conflict."""

    def __init__(self, client: Any, admin: KubeSliceApi) -> None:
        super().__init__(client)
        self.admin = admin
        self.conflicts = 0

    def replace_slice(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        if self.conflicts == 0:
            self.conflicts += 1
            current = next(o for o in self.admin.list_slices(f"metadata.name={name}")[0])
            current["metadata"].setdefault("labels", {})["edited-by"] = "someone-else"
            self.admin.replace_slice(name, current)
        return super().replace_slice(name, body)


def test_a_conflict_is_resolved_by_relisting(
    control_plane: ControlPlane, node: Node, publishers: list[SlicePublisher]
) -> None:
    api = ConflictingApi(
        control_plane.driver_client("cpu", node.name), KubeSliceApi(control_plane.api_client())
    )
    pub = SlicePublisher(api, CPU, node.name, resync_delay=1.0)
    publishers.append(pub)
    pub.set_devices(cpus(4))
    pub.start()
    assert pub.wait_synced(30)
    pub.set_devices(cpus(5))
    assert pub.wait_synced(30), pub.status()
    (obj,) = stored(control_plane, CPU, node.name)
    assert api.conflicts == 1
    assert len(obj["spec"]["devices"]) == 5
    assert obj["metadata"]["labels"] == {"edited-by": "someone-else"}  # their change survives ours
    assert api.writes == {"create": 1, "update": 1}


def test_deleted_or_edited_slices_are_restored_within_5_s(
    control_plane: ControlPlane, node: Node, publishers: list[SlicePublisher]
) -> None:
    pub = publisher(control_plane, node, cpus(256), publishers)
    assert pub.wait_synced(30)
    admin = KubeSliceApi(control_plane.api_client())
    victim = stored(control_plane, CPU, node.name)[1]
    began = time.monotonic()
    admin.delete_slice(victim["metadata"]["name"], "", "")
    restored = _eventually(
        lambda: len(stored(control_plane, CPU, node.name)) == 2 and pub.status().synced, 10
    )
    took = time.monotonic() - began
    assert restored and took < 5.0, f"restored={restored} after {took:.1f} s"
    assert device_names(stored(control_plane, CPU, node.name)) == [d.name for d in cpus(256)]

    # someone edits a slice's devices: put back too
    obj = stored(control_plane, CPU, node.name)[0]
    obj["spec"]["devices"] = obj["spec"]["devices"][:3]
    admin.replace_slice(obj["metadata"]["name"], obj)
    began = time.monotonic()
    assert _eventually(lambda: len(stored(control_plane, CPU, node.name)[0]["spec"]["devices"]) == 128, 10)
    assert time.monotonic() - began < 5.0


def test_the_kubelet_wiping_all_node_slices_is_repaired(
    control_plane: ControlPlane, node: Node, publishers: list[SlicePublisher]
) -> None:
    cpu = publisher(control_plane, node, cpus(200), publishers, kind="cpu")
    nic = publisher(control_plane, node, vfs(70), publishers, kind="nic")
    assert cpu.wait_synced(30) and nic.wait_synced(30)
    began = time.monotonic()
    k8s.ResourceV1Api(control_plane.api_client()).delete_collection_resource_slice(
        field_selector=f"spec.nodeName={node.name}"
    )
    assert _eventually(
        lambda: (
            len(stored(control_plane, CPU, node.name)) == 2
            and len(stored(control_plane, NIC, node.name)) == 2
        ),
        10,
    )
    assert time.monotonic() - began < 5.0


def test_an_api_server_outage_is_survived_and_changes_made_during_it_land(
    control_plane: ControlPlane, node: Node, publishers: list[SlicePublisher]
) -> None:
    pub = publisher(control_plane, node, cpus(10), publishers, backoff_max=5.0)
    assert pub.wait_synced(30)
    control_plane.stop_apiserver()
    try:
        pub.set_devices(cpus(12))
        time.sleep(4)
        assert not pub.status().synced
        assert pub.status().last_error
    finally:
        control_plane.start_apiserver()
    assert pub.wait_synced(30), pub.status()
    assert device_names(stored(control_plane, CPU, node.name)) == [f"cpu-{i}" for i in range(12)]
    assert writes(pub) == {"create": 1, "update": 1}


def test_delete_slices_on_exit(
    control_plane: ControlPlane, node: Node, publishers: list[SlicePublisher]
) -> None:
    pub = publisher(control_plane, node, cpus(300), publishers)
    assert pub.wait_synced(30)
    pub.stop()
    assert len(stored(control_plane, CPU, node.name)) == 3  # default: slices stay for the kubelet/GC
    pub = publisher(control_plane, node, cpus(300), publishers)
    assert pub.wait_synced(30)
    assert writes(pub) == {}
    pub.stop(delete_slices=True)
    assert stored(control_plane, CPU, node.name) == []


class EventCounter:
    """Counts server watch events of our slices (an independent view of our writes)."""

    def __init__(self, cp: ControlPlane, driver: str, node: str) -> None:
        self.api = KubeSliceApi(cp.api_client())
        self.selector = f"spec.driver={driver},spec.nodeName={node}"
        _, self.version = self.api.list_slices(self.selector)
        self.events: list[str] = []
        self.stream: WatchStream | None = None
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.stream = self.api.watch_slices(self.selector, self.version, 600)
        try:
            for event in self.stream:
                if event["type"] != "BOOKMARK":
                    self.events.append(event["type"])
        except ApiError:
            if not self.stopped:  # stop() ends the stream mid-read: that is no failure
                raise

    def stop(self) -> None:
        self.stopped = True
        if self.stream is not None:
            self.stream.stop()


@pytest.mark.slow
def test_zero_writes_over_an_idle_minute(
    control_plane: ControlPlane, node: Node, publishers: list[SlicePublisher]
) -> None:
    pub = publisher(control_plane, node, vfs(300), publishers, kind="nic", watch_timeout=20, resync_period=15)
    assert pub.wait_synced(30)
    time.sleep(1)
    counter = EventCounter(control_plane, NIC, node.name)
    before = fingerprint(stored(control_plane, NIC, node.name))
    written = writes(pub)
    time.sleep(60)  # three watch restarts and four periodic checks happen in here
    counter.stop()
    assert writes(pub) == written
    assert fingerprint(stored(control_plane, NIC, node.name)) == before
    assert counter.events == []


def _eventually(check: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return bool(check())


def test_long_node_names_keep_decodable_slice_names(
    control_plane: ControlPlane, publishers: list[SlicePublisher]
) -> None:
    """generateName prefixes are cut to 58 characters (ours, like the server's); the index survives."""
    long = Node(unique_name("a-rather-long-node-name-in-some-rack-of-some-zone"), "")
    long.uid = control_plane.create_node(long.name)
    pub = publisher(control_plane, long, cpus(130), publishers)
    assert pub.wait_synced(30), pub.status()
    items = stored(control_plane, CPU, long.name)
    assert [len(o["metadata"]["name"]) for o in items] == [63, 63]
    assert [o["metadata"]["name"][:6] for o in items] == ["00000-", "00001-"]
    pub.stop()
    again = publisher(control_plane, long, cpus(130), publishers)
    assert again.wait_synced(30)
    assert writes(again) == {}


def test_a_recreated_node_gets_its_slices_back_owned_by_the_new_uid(
    control_plane: ControlPlane, node: Node, publishers: list[SlicePublisher]
) -> None:
    """Deleting the Node garbage-collects its slices (real kube-controller-manager GC); when the
    node comes back under the same name, our slices return with the new owner UID. Admin
    credentials here: a driver token is bound to a pod that goes away with the node."""
    pub = SlicePublisher(KubeSliceApi(control_plane.api_client()), CPU, node.name, backoff_max=2.0)
    publishers.append(pub)
    pub.set_devices(cpus(4))
    pub.start()
    assert pub.wait_synced(30)
    core = k8s.CoreV1Api(control_plane.api_client())
    core.delete_node(node.name)
    assert _eventually(lambda: stored(control_plane, CPU, node.name) == [], 30), (
        "GC did not remove the slices"
    )
    new_uid = control_plane.create_node(node.name)
    assert new_uid != node.uid

    def owned_by_new_node() -> bool:
        items = stored(control_plane, CPU, node.name)
        return len(items) == 1 and items[0]["metadata"]["ownerReferences"][0]["uid"] == new_uid

    assert _eventually(owned_by_new_node, 30)
    time.sleep(3)  # and the GC leaves them alone now
    assert owned_by_new_node()


def test_two_instances_of_one_pool_stop_fighting_and_the_newer_owns_it(
    control_plane: ControlPlane, node: Node, publishers: list[SlicePublisher]
) -> None:
    """A surge update that changes attributes runs the old and the new driver side by side,
    both publishing the node's pool. Each sees the other's write as drift; without a rule they
    rewrite each other every resync delay for as long as both run."""
    old_devices = [Device(f"vf-{i}", {"nic.topodra.io/version": "1.0.0"}) for i in range(4)]
    new_devices = [Device(f"vf-{i}", {"nic.topodra.io/version": "1.1.0"}) for i in range(4)]
    old = publisher(control_plane, node, old_devices, publishers, kind="nic", resync_delay=0.5)
    assert old.wait_synced(30), old.status()
    new = publisher(control_plane, node, new_devices, publishers, kind="nic", resync_delay=0.5)

    def versions() -> set[str]:
        items = stored(control_plane, NIC, node.name)
        return {
            d["attributes"]["nic.topodra.io/version"]["string"] for o in items for d in o["spec"]["devices"]
        }

    assert _eventually(lambda: versions() == {"1.1.0"}, 30), versions()
    time.sleep(2)  # the old instance has seen the new one's write by now
    before = fingerprint(stored(control_plane, NIC, node.name))
    counts = sum(writes(old).values()), sum(writes(new).values())
    start = time.monotonic()
    time.sleep(10)  # a fight at 2 writes/s would rewrite the slice ~20 times here
    seconds = time.monotonic() - start
    rates = [(sum(writes(p).values()) - n) / seconds for p, n in zip((old, new), counts, strict=True)]
    print(f"two instances of one pool over {seconds:.1f} s: old {rates[0]:.2f}, new {rates[1]:.2f} writes/s")
    assert fingerprint(stored(control_plane, NIC, node.name)) == before, (writes(old), writes(new))
    assert versions() == {"1.1.0"}
    assert writes(new) == {"update": 1}
