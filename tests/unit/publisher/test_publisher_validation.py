"""Pre-publish validation: each API server rule is enforced, named, and costs only what it must."""

from __future__ import annotations

import pytest
from topodra.common.device import (
    Capacity,
    Device,
    NodeAllocatable,
    RequestPolicy,
    Taint,
    Version,
)
from topodra.common.publisher.validation import LIMITS_1_34, Limits, validate


def one(device: Device, **kw: object) -> tuple[list[Device], list[tuple[str, str, str, str]]]:
    result = validate([device], **kw)  # type: ignore[arg-type]
    return list(result.devices), [(p.device, p.rule, p.field, p.action) for p in result.problems]


@pytest.mark.parametrize(
    ("key", "value", "rule"),
    [
        ("example.com/model", "x" * 65, "attribute-string-length"),
        ("example.com/driverVersion", Version("v1.2.3"), "attribute-version-semver"),
        ("example.com/driverVersion", Version("1.02.3"), "attribute-version-semver"),
        ("example.com/driverVersion", Version("1.2"), "attribute-version-semver"),
        ("example.com/ids", (), "attribute-list-empty"),
        ("example.com/ids", (1, "a"), "attribute-list-mixed"),
        ("example.com/big", 2**63, "attribute-int-range"),
        ("example.com/two/slashes", 1, "attribute-name-qualified"),
        ("Example.com/x", 1, "attribute-name-qualified"),
        ("example.com/" + "a" * 33, 1, "attribute-name-qualified"),
        ("example.com/has-dash", 1, "attribute-name-qualified"),
        ("9lives", 1, "attribute-name-qualified"),
        ("resource.kubernetes.io/cpuSocket", 0, "attribute-name-reserved"),
        ("node.kubernetes.io/zone", "a", "attribute-name-reserved"),
        ("resource.kubernetes.io/numaNode", -1, "attribute-standard-format"),
        ("resource.kubernetes.io/pciBusID", "0000:3B:00.0", "attribute-standard-format"),
        ("resource.kubernetes.io/pcieRoot", "0000:00", "attribute-standard-format"),
        ("resource.kubernetes.io/pcieRoot", ("pci0000:00", "0000:80"), "attribute-standard-format"),
    ],
)
def test_a_bad_attribute_is_dropped_and_the_device_stays(key: str, value: object, rule: str) -> None:
    device = Device("gpu-0", {key: value, "example.com/ok": True})  # type: ignore[dict-item]
    kept, problems = one(device)
    assert problems == [("gpu-0", rule, key, "dropped-attribute")]
    assert [d.name for d in kept] == ["gpu-0"]
    assert dict(kept[0].attributes) == {"example.com/ok": True}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("example.com/model", "x" * 64),
        ("example.com/v", Version("1.2.3-rc.1+build.5")),
        ("example.com/v", Version("0.0.0")),
        ("example.com/ids", (1, 2, 3)),
        ("example.com/vs", (Version("1.0.0"), Version("2.0.0"))),
        ("plainIdentifier", "unqualified keys belong to the driver"),
        ("resource.kubernetes.io/numaNode", 1),
        ("resource.kubernetes.io/numaNode", (1, 0)),
        ("resource.kubernetes.io/pciBusID", "0000:3b:00.0"),
        ("resource.kubernetes.io/pcieRoot", "pci0000:00"),
        ("resource.kubernetes.io/pcieRoot", ("pci0000:00", "pci0000:80")),
    ],
)
def test_valid_attributes_pass(key: str, value: object) -> None:
    kept, problems = one(Device("gpu-0", {key: value}))  # type: ignore[dict-item]
    assert problems == []
    assert dict(kept[0].attributes) == {key: value}


def test_a_device_with_a_bad_name_is_dropped_the_others_publish() -> None:
    result = validate([Device("ok-0"), Device("CPU_1"), Device("ok-2"), Device("ok-0")])
    assert [d.name for d in result.devices] == ["ok-0", "ok-2"]
    assert [(p.device, p.rule, p.action) for p in result.problems] == [
        ("CPU_1", "device-name-dns-label", "dropped-device"),
        ("ok-0", "device-name-duplicate", "dropped-device"),
    ]
    assert "CPU_1" in str(result.problems[0]) and "device-name-dns-label" in str(result.problems[0])


def test_more_than_32_attributes_and_capacities_drop_the_device() -> None:
    attrs = {f"example.com/a{i}": i for i in range(30)}
    caps = {f"example.com/c{i}": Capacity("1") for i in range(2)}
    assert one(Device("d", attrs, caps))[1] == []
    caps["example.com/c2"] = Capacity("1")
    assert one(Device("d", attrs, caps))[1] == [("d", "too-many-attributes", "", "dropped-device")]


def test_more_than_48_attribute_values_drop_the_device() -> None:
    attrs: dict[str, object] = {
        "example.com/list": tuple(range(40)),
        **{f"example.com/s{i}": i for i in range(8)},
    }
    assert one(Device("d", attrs))[1] == []  # type: ignore[arg-type]
    attrs["example.com/s8"] = 8
    assert one(Device("d", attrs))[1] == [("d", "too-many-attribute-values", "", "dropped-device")]  # type: ignore[arg-type]


def test_list_attributes_can_be_turned_off_for_servers_without_the_gate() -> None:
    device = Device("d", {"resource.kubernetes.io/numaNode": (0, 1), "example.com/x": 1})
    kept, problems = one(device, limits=Limits(list_attributes=False))
    assert problems == [
        ("d", "attribute-list-disabled", "resource.kubernetes.io/numaNode", "dropped-attribute")
    ]
    assert dict(kept[0].attributes) == {"example.com/x": 1}


@pytest.mark.parametrize(
    ("capacity", "multiple", "rule"),
    [
        (Capacity("80GB"), False, "capacity-quantity"),
        (Capacity("-1"), False, "capacity-negative"),
        (Capacity("8", RequestPolicy("1")), False, "capacity-request-policy-forbidden"),
        (Capacity("8", RequestPolicy("9")), True, "capacity-request-policy"),
        (Capacity("8", RequestPolicy("2", valid_values=("1", "4"))), True, "capacity-request-policy"),
        (Capacity("8", RequestPolicy("2", valid_values=("4", "2"))), True, "capacity-request-policy"),
        (
            Capacity("8", RequestPolicy("2", valid_values=tuple(str(i) for i in range(1, 12)))),
            True,
            "capacity-request-policy",
        ),
        (Capacity("8", RequestPolicy("2", valid_values=("2",), min="1")), True, "capacity-request-policy"),
        (Capacity("8", RequestPolicy("1", min="2")), True, "capacity-request-policy"),
        (Capacity("8", RequestPolicy("2", min="1", max="9")), True, "capacity-request-policy"),
        (Capacity("8", RequestPolicy("2", min="1", step="0")), True, "capacity-request-policy"),
        (Capacity("8", RequestPolicy("2", min="0", step="3")), True, "capacity-request-policy"),
        (Capacity("8", RequestPolicy("2", max="4")), True, "capacity-request-policy"),
    ],
)
def test_capacity_rules_drop_the_device(capacity: Capacity, multiple: bool, rule: str) -> None:
    device = Device(
        "nic-0",
        {"example.com/x": 1},
        {"example.com/bandwidth": capacity},
        allow_multiple_allocations=multiple,
    )
    kept, problems = one(device)
    assert kept == []
    assert problems == [("nic-0", rule, "example.com/bandwidth", "dropped-device")]


@pytest.mark.parametrize(
    "policy",
    [
        RequestPolicy("1Gi", valid_values=("512Mi", "1Gi", "2Gi")),
        RequestPolicy("2Gi", min="1Gi", max="8Gi", step="1Gi"),
        RequestPolicy("1500m", min="500m", step="500m"),
        RequestPolicy("1"),
    ],
)
def test_valid_request_policies_pass(policy: RequestPolicy) -> None:
    device = Device(
        "nic-0", capacity={"example.com/bw": Capacity("8Gi", policy)}, allow_multiple_allocations=True
    )
    assert one(device)[1] == []


def test_taint_rules_and_the_1_34_limit() -> None:
    ok = Device("g", taints=tuple(Taint(f"example.com/t{i}", "v", "NoExecute") for i in range(5)))
    assert one(ok)[1] == []
    assert one(ok, limits=LIMITS_1_34)[1] == [("g", "too-many-taints", "", "dropped-device")]
    assert one(Device("g", taints=(Taint("bad key!"),)))[1][0][1] == "taint-key"
    assert one(Device("g", taints=(Taint("example.com/k", "has space"),)))[1][0][1] == "taint-value"
    assert (
        one(Device("g", taints=(Taint("example.com/k", effect="PreferNoSchedule"),)))[1][0][1]
        == "taint-effect"
    )
    many = Device("g", taints=tuple(Taint(f"example.com/t{i}") for i in range(17)))
    assert one(many)[1] == [("g", "too-many-taints", "", "dropped-device")]


CPUS = "cpu.topodra.io/cpu"


@pytest.mark.parametrize(
    ("resource", "mapping"),
    [
        ("example.com/gpus", NodeAllocatable(device_multiplier="1")),  # an extended resource
        ("cpu", NodeAllocatable()),  # neither form
        ("cpu", NodeAllocatable(device_multiplier="2", capacity_key=CPUS, capacity_multiplier="1")),  # both
        ("cpu", NodeAllocatable(capacity_key=CPUS)),  # a key without its multiplier
        (
            "cpu",
            NodeAllocatable(capacity_key="cpu.topodra.io/cores", capacity_multiplier="1"),
        ),  # no such capacity
        ("cpu", NodeAllocatable(device_multiplier="0")),
        ("memory", NodeAllocatable(device_multiplier="-1Gi")),
    ],
)
def test_node_allocatable_rules_drop_the_device(resource: str, mapping: NodeAllocatable) -> None:
    device = Device("core-0-1", capacity={CPUS: Capacity("2")}, node_allocatable={resource: mapping})
    kept, problems = one(device)
    assert kept == []
    assert problems == [("core-0-1", "node-allocatable", resource, "dropped-device")]


def test_valid_node_allocatable_mappings_pass() -> None:
    core = Device("core-0-1", capacity={CPUS: Capacity("2")}, node_allocatable={"cpu": NodeAllocatable("2")})
    numa = Device(
        "numa-0",
        capacity={CPUS: Capacity("32", RequestPolicy("1", min="1", max="32", step="1"))},
        allow_multiple_allocations=True,
        node_allocatable={
            "cpu": NodeAllocatable(capacity_key=CPUS, capacity_multiplier="1"),
            "hugepages-2Mi": NodeAllocatable(capacity_key=CPUS, capacity_multiplier="4Mi"),
        },
    )
    assert one(core)[1] == [] and one(numa)[1] == []
    assert numa.to_api()["nodeAllocatableResources"]["cpu"] == {
        "mapping": {"capacityKey": CPUS, "capacityMultiplier": "1"}
    }
