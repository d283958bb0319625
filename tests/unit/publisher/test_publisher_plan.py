"""Sync planning and semantic comparison: generation rules, matching, zero writes when equal."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from topodra.common.device import Capacity, Device, NodeAllocatable, RequestPolicy, Taint
from topodra.common.publisher import compare
from topodra.common.publisher.build import slice_specs
from topodra.common.publisher.plan import plan_sync

DRIVER = "nic.topodra.io"
NODE = "node-b"
UID = "3f0e8d2a-1111-4000-8000-00000000000b"
_counter = itertools.count(1)


def stored(obj: dict[str, Any], *, name: str | None = None) -> dict[str, Any]:
    """What the API server makes of a created object: a name, uid and resourceVersion, plus the
    rewriting it does: canonical quantities (here: spelled differently but equal) and taint times."""
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    n = next(_counter)
    meta["name"] = name or meta.pop("generateName") + f"x{n:04d}"
    meta.pop("generateName", None)
    meta.update(uid=f"uid-{n}", resourceVersion=str(100 + n))
    for device in out["spec"].get("devices", []):
        for taint in device.get("taints", []):
            taint.setdefault("timeAdded", "2026-12-02T15:00:00Z")
        for cap in device.get("capacity", {}).values():
            if cap["value"] == "1.5Gi":
                cap["value"] = "1536Mi"
    return out


def plan(devices: list[Device], existing: list[dict[str, Any]], **kw: Any) -> Any:
    return plan_sync(
        slice_specs(DRIVER, NODE, devices), existing, driver_name=DRIVER, node_name=NODE, node_uid=UID, **kw
    )


def nics(n: int, speed: int = 100) -> list[Device]:
    return [Device(f"vf-{i}", {"nic.topodra.io/speedGbps": speed}) for i in range(n)]


def publish(devices: list[Device]) -> list[dict[str, Any]]:
    p = plan(devices, [])
    return [stored(c) for c in p.creates]


def test_a_fresh_pool_creates_every_slice_at_generation_1() -> None:
    p = plan(nics(300), [])
    assert (p.generation, p.slice_count, len(p.creates), p.updates, p.deletes) == (1, 3, 3, (), ())
    assert [c["spec"]["pool"]["generation"] for c in p.creates] == [1, 1, 1]


def test_stored_slices_equal_to_the_desired_ones_need_zero_writes() -> None:
    devices = [
        *nics(200),
        Device("vf-x", capacity={"nic.topodra.io/bw": Capacity("1.5Gi")}),
        Device("vf-t", taints=(Taint("nic.topodra.io/link", "down", "NoSchedule"),)),
    ]
    existing = publish(devices)
    p = plan(devices, existing)
    assert p.writes == 0
    assert len(p.unchanged) == len(existing)


def test_one_changed_device_rewrites_only_its_slice_and_keeps_the_generation() -> None:
    devices = nics(300)
    existing = publish(devices)
    devices[150] = Device("vf-150", {"nic.topodra.io/speedGbps": 25})
    p = plan(devices, existing)
    assert (p.generation, len(p.updates), p.creates, p.deletes) == (1, 1, (), ())
    update = p.updates[0]
    assert update["metadata"]["name"] == existing[1]["metadata"]["name"]
    assert update["metadata"]["resourceVersion"] == existing[1]["metadata"]["resourceVersion"]
    assert update["spec"]["devices"][150 - 128]["attributes"]["nic.topodra.io/speedGbps"] == {"int": 25}


def test_changes_in_two_slices_bump_the_generation_and_rewrite_all() -> None:
    devices = nics(300)
    existing = publish(devices)
    devices[0] = Device("vf-0", {"nic.topodra.io/speedGbps": 1})
    devices[299] = Device("vf-299", {"nic.topodra.io/speedGbps": 1})
    p = plan(devices, existing)
    assert (p.generation, len(p.updates), p.creates) == (2, 3, ())
    assert all(u["spec"]["pool"]["generation"] == 2 for u in p.updates)


def test_a_new_slice_bumps_the_generation() -> None:
    existing = publish(nics(128))
    p = plan(nics(129), existing)
    assert (p.generation, len(p.updates), len(p.creates)) == (2, 1, 1)
    assert p.updates[0]["spec"]["pool"]["resourceSliceCount"] == 2
    assert p.creates[0]["metadata"]["generateName"].startswith("00001-")


def test_fewer_slices_delete_the_obsolete_one_first() -> None:
    existing = publish(nics(200))
    p = plan(nics(100), existing)
    assert [d.name for d in p.deletes] == [existing[1]["metadata"]["name"]]
    assert p.deletes[0].uid == existing[1]["metadata"]["uid"]
    assert p.deletes[0].resource_version == existing[1]["metadata"]["resourceVersion"]
    assert len(p.updates) == 1 and p.updates[0]["spec"]["pool"]["resourceSliceCount"] == 1


def test_foreign_and_stale_slices_are_obsolete() -> None:
    existing = publish(nics(10))
    older = stored(plan(nics(10), []).creates[0], name=f"00000-{DRIVER}-{NODE}-older")
    older["spec"]["pool"]["generation"] = 0
    old_scheme = stored(plan(nics(10), []).creates[0], name=f"{NODE}-{DRIVER}-abcde")
    other_pool = copy.deepcopy(existing[0])
    other_pool["metadata"]["name"] = "00000-x"
    other_pool["spec"]["pool"]["name"] = "elsewhere"
    dup = stored(plan(nics(10), []).creates[0], name=f"00000-{DRIVER}-{NODE}-zzzzz")
    p = plan(nics(10), [*existing, older, old_scheme, other_pool, dup])
    assert {d.reason for d in p.deletes} == {
        "older pool generation",
        "name without slice index",
        "slice of another pool",
        "duplicate slice index",
    }
    assert len(p.deletes) == 4 and p.updates == () and p.creates == ()
    assert existing[0]["metadata"]["name"] not in {d.name for d in p.deletes}


def test_edited_or_unowned_slices_are_repaired_by_update() -> None:
    existing = publish(nics(5))
    edited = copy.deepcopy(existing)
    edited[0]["spec"]["devices"][0]["attributes"]["nic.topodra.io/speedGbps"] = {"int": 1}
    assert len(plan(nics(5), edited).updates) == 1
    unowned = copy.deepcopy(existing)
    unowned[0]["metadata"]["ownerReferences"] = []
    unowned[0]["metadata"]["labels"] = {"someone": "else"}
    p = plan(nics(5), unowned)
    assert len(p.updates) == 1
    assert p.updates[0]["metadata"]["ownerReferences"][0]["uid"] == UID
    assert p.updates[0]["metadata"]["labels"] == {"someone": "else"}


def test_taint_times_set_by_the_server_are_kept_on_update() -> None:
    devices = [Device("vf-0", taints=(Taint("nic.topodra.io/link", "down"),)), Device("vf-1")]
    existing = publish(devices)
    devices[1] = Device("vf-1", {"nic.topodra.io/x": 1})
    (update,) = plan(devices, existing).updates
    assert update["spec"]["devices"][0]["taints"][0]["timeAdded"] == "2026-12-02T15:00:00Z"


def test_quantities_compare_by_value() -> None:
    def spec(value: str, default: str = "1") -> dict[str, Any]:
        cap = {
            "value": value,
            "requestPolicy": {"default": default, "validRange": {"min": "0", "step": "500m"}},
        }
        return {"devices": [{"name": "d", "capacity": {"example.com/m": cap}}]}

    assert compare.same_spec(spec("1Gi"), spec("1073741824"))
    assert compare.same_spec(spec("1.5Gi"), spec("1536Mi"))
    assert compare.same_spec(spec("2000m", "1000m"), spec("2", "1"))
    assert compare.same_spec(spec("1e3"), spec("1k"))
    assert not compare.same_spec(spec("1Gi"), spec("1G"))


def test_fields_omitted_by_the_server_compare_equal_but_false_attributes_do_not_vanish() -> None:
    sent = {
        "devices": [{"name": "d", "attributes": {"x": {"bool": False}}, "allowMultipleAllocations": False}]
    }
    back = {"devices": [{"name": "d", "attributes": {"x": {"bool": False}}}]}
    assert compare.same_spec(sent, back)
    assert not compare.same_spec(sent, {"devices": [{"name": "d"}]})
    assert compare.same_spec({"devices": []}, {})


def test_dropped_fields_name_the_feature_and_are_then_expected() -> None:
    device = Device(
        "d",
        {"x": 1},
        {"example.com/bw": Capacity("10", RequestPolicy("1"))},
        taints=(Taint("example.com/t"),),
        allow_multiple_allocations=True,
    )
    sent = slice_specs(DRIVER, NODE, [device])[0]
    back = copy.deepcopy(sent)
    del back["devices"][0]["taints"]
    del back["devices"][0]["allowMultipleAllocations"]
    del back["devices"][0]["capacity"]["example.com/bw"]["requestPolicy"]
    features = compare.dropped_features(sent, back)
    assert features == {compare.TAINTS, compare.CONSUMABLE}
    assert compare.same_spec(compare.strip_features(sent, features), back)
    # and the planner then finds nothing to write
    obj = {"metadata": {"name": f"00000-{DRIVER}-{NODE}-aaaaa", "uid": "u", "resourceVersion": "5",
                        "ownerReferences": [{"kind": "Node", "name": NODE, "uid": UID}]},
           "spec": {**back, "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1}}}  # fmt: skip
    assert plan([device], [obj]).writes == 1
    assert plan([device], [obj], disabled_features=features).writes == 0


def test_list_attributes_are_stripped_when_their_gate_is_off() -> None:
    spec = slice_specs(DRIVER, NODE, [Device("d", {"resource.kubernetes.io/numaNode": (0, 1), "x": 1})])[0]
    assert spec["devices"][0]["attributes"]["resource.kubernetes.io/numaNode"] == {"ints": [0, 1]}
    stripped = compare.strip_features(spec, {compare.LIST_ATTRIBUTES})
    assert stripped["devices"][0]["attributes"] == {"x": {"int": 1}}


def test_features_a_previous_instance_found_off_are_read_from_its_slices() -> None:
    from topodra.common.publisher.plan import infer_dropped

    shared = Capacity("25G", RequestPolicy("1G", min="1G", step="1G"))
    devices = [
        Device("vf-0", {"x": 1}, {"nic.topodra.io/bw": shared}, allow_multiple_allocations=True),
        Device("vf-1", {"x": 2}),
    ]
    specs = slice_specs(DRIVER, NODE, devices)
    (obj,) = publish(devices)
    assert infer_dropped(specs, [obj], driver_name=DRIVER, node_name=NODE) == set()
    dropped = copy.deepcopy(obj)
    del dropped["spec"]["devices"][0]["allowMultipleAllocations"]
    del dropped["spec"]["devices"][0]["capacity"]["nic.topodra.io/bw"]["requestPolicy"]
    assert infer_dropped(specs, [dropped], driver_name=DRIVER, node_name=NODE) == {compare.CONSUMABLE}
    # a slice that also differs otherwise is drift to repair, not a disabled gate
    edited = copy.deepcopy(dropped)
    edited["spec"]["devices"][1]["attributes"]["x"] = {"int": 3}
    assert infer_dropped(specs, [edited], driver_name=DRIVER, node_name=NODE) == set()


@pytest.mark.parametrize(
    "now",
    [
        Device("d", {"x": 1}, taints=(Taint("nic.topodra.io/link"),)),  # the device turned unhealthy
        Device("d", {"resource.kubernetes.io/numaNode": (0, 1)}),  # --*-list-attributes turned on
        Device(  # --cpu-node-allocatable turned on
            "d",
            {"x": 1},
            {"cpu.topodra.io/cpu": Capacity("2")},
            node_allocatable={"cpu": NodeAllocatable("2")},
        ),
    ],
)
def test_fields_that_come_with_state_or_flags_are_not_taken_for_a_gate_that_is_off(now: Device) -> None:
    """Slices left by an instance that ran before the device's state or the operator's flags
    changed lack these fields: the new instance must write them, not expect them dropped."""
    from topodra.common.publisher.plan import infer_dropped

    before = Device("d", {"x": 1}, {"cpu.topodra.io/cpu": Capacity("2")} if now.capacity else {})
    if "resource.kubernetes.io/numaNode" in now.attributes:
        before = Device("d", {})
    (obj,) = publish([before])
    specs = slice_specs(DRIVER, NODE, [now])
    assert compare.dropped_features(specs[0], obj["spec"])  # the stored slice lacks the field
    assert infer_dropped(specs, [obj], driver_name=DRIVER, node_name=NODE) == set()
    assert plan([now], [obj]).writes == 1


def test_a_half_done_generation_bump_is_finished_with_one_update() -> None:
    """A conflict or crash between the updates of a bump leaves slice 0 at the old generation."""
    devices = nics(200)
    existing = publish(devices)
    existing[1]["spec"]["pool"]["generation"] = 2  # slice 1 was rewritten, slice 0 not yet
    p = plan(devices, existing)
    assert (p.generation, p.deletes, p.creates) == (2, (), ())
    assert [u["metadata"]["name"] for u in p.updates] == [existing[0]["metadata"]["name"]]
    assert p.updates[0]["spec"]["pool"]["generation"] == 2
