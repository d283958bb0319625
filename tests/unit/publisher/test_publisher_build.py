"""Slice building without a cluster: chunking limits, naming, ownership, order."""

from __future__ import annotations

from topodra.common.device import Capacity, Device, Taint
from topodra.common.publisher.build import (
    GENERATE_NAME_MAX,
    PLACEHOLDER_NODE_UID,
    build_desired,
    build_slices,
    chunk_devices,
    decode_index,
    generate_name,
)

DRIVER = "cpu.topodra.io"
NODE = "node-a"
UID = "6a3c1f2e-0000-4000-8000-000000000001"


def plain(n: int, prefix: str = "cpu") -> list[Device]:
    return [Device(f"{prefix}-{i}", {"index": i}) for i in range(n)]


def tainted(n: int, prefix: str = "bad") -> list[Device]:
    return [Device(f"{prefix}-{i}", taints=(Taint("example.com/broken"),)) for i in range(n)]


def names_per_slice(slices: list[dict]) -> list[list[str]]:
    return [[d["name"] for d in s["spec"].get("devices", [])] for s in slices]


def test_128_plain_devices_fill_one_slice_and_129_need_two() -> None:
    assert [len(c) for c in chunk_devices(plain(128))] == [128]
    assert [len(c) for c in chunk_devices(plain(129))] == [128, 1]
    assert [len(c) for c in chunk_devices(plain(256))] == [128, 128]


def test_taints_and_lists_lower_the_limit_to_64() -> None:
    assert [len(c) for c in chunk_devices(tainted(64))] == [64]
    assert [len(c) for c in chunk_devices(tainted(65))] == [64, 1]
    lists = [Device(f"l-{i}", {"resource.kubernetes.io/numaNode": (0, 1)}) for i in range(65)]
    assert [len(c) for c in chunk_devices(lists)] == [64, 1]


def test_an_advanced_device_closes_a_long_plain_chunk_instead_of_overfilling_it() -> None:
    devices = plain(100) + tainted(1) + plain(10, "tail")
    sizes = [len(c) for c in chunk_devices(devices)]
    assert sizes == [100, 11]  # the tainted one starts a chunk limited to 64
    for chunk in chunk_devices(devices):
        limit = 64 if any(d.uses_advanced_features for d in chunk) else 128
        assert len(chunk) <= limit


def test_order_is_the_drivers_across_slices() -> None:
    devices = plain(300)
    slices = build_slices(DRIVER, NODE, UID, devices)
    assert [n for names in names_per_slice(slices) for n in names] == [d.name for d in devices]
    assert [len(n) for n in names_per_slice(slices)] == [128, 128, 44]


def test_every_slice_is_node_local_in_the_node_pool_and_owned_by_the_node() -> None:
    slices = build_slices(DRIVER, NODE, UID, plain(200), generation=3)
    for i, s in enumerate(slices):
        assert s["apiVersion"] == "resource.k8s.io/v1" and s["kind"] == "ResourceSlice"
        assert s["spec"]["driver"] == DRIVER
        assert s["spec"]["nodeName"] == NODE
        assert s["spec"]["pool"] == {"name": NODE, "generation": 3, "resourceSliceCount": 2}
        assert s["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": UID, "controller": True}
        ]
        assert s["metadata"]["generateName"] == f"{i:05x}-{DRIVER}-{NODE}-"
        assert "name" not in s["metadata"]


def test_no_devices_still_publish_one_empty_slice() -> None:
    slices = build_slices(DRIVER, NODE, None, [])
    assert len(slices) == 1
    assert slices[0]["spec"]["devices"] == []
    assert slices[0]["spec"]["pool"]["resourceSliceCount"] == 1
    assert slices[0]["metadata"]["ownerReferences"][0]["uid"] == PLACEHOLDER_NODE_UID


def test_index_is_hex_padded_to_five_or_more_digits() -> None:
    assert generate_name(10, 11, "d.io", "n") == "0000a-d.io-n-"
    assert generate_name(0, 0x100000, "d.io", "n") == "00000-d.io-n-"  # last index 0xfffff: 5 digits
    assert generate_name(0, 0x100001, "d.io", "n") == "000000-d.io-n-"  # last index 0x100000: 6
    assert generate_name(0xFFFFF, 0x100001, "d.io", "n").startswith("0fffff-")


def test_long_prefixes_are_cut_like_the_server_cuts_generate_name() -> None:
    node = "a-very-long-node-name.with.some.domain.parts.example.internal"
    prefix = generate_name(3, 4, "accelerator.topodra.io", node)
    assert len(prefix) == GENERATE_NAME_MAX
    assert prefix.startswith("00003-accelerator.topodra.io-a-very")
    assert decode_index(prefix + "x7k2p", "accelerator.topodra.io", node) == 3


def test_decode_index_accepts_only_our_own_scheme() -> None:
    assert decode_index(f"0001f-{DRIVER}-{NODE}-abcde", DRIVER, NODE) == 31
    assert decode_index(f"{NODE}-{DRIVER}-abcde", DRIVER, NODE) is None  # pre-1.36 scheme
    # a node named like hex must not make an old-scheme name decode
    assert decode_index(f"cafe1-{DRIVER}-abcde", DRIVER, "cafe1") is None
    assert decode_index(f"00000-gpu.example.com-{NODE}-abcde", DRIVER, NODE) is None
    assert decode_index(f"00000-{DRIVER}-{NODE}-", DRIVER, NODE) is None  # no server suffix
    assert decode_index(f"0000-{DRIVER}-{NODE}-abcde", DRIVER, NODE) is None  # 4 digits


def test_invalid_devices_are_left_out_and_reported_the_rest_is_built() -> None:
    devices = [*plain(3), Device("Bad_Name"), Device("cap", capacity={"memory": Capacity("lots")})]
    desired = build_desired(DRIVER, NODE, UID, devices)
    assert [d.name for d in desired.devices] == ["cpu-0", "cpu-1", "cpu-2"]
    assert {(p.device, p.rule) for p in desired.problems} == {
        ("Bad_Name", "device-name-dns-label"),
        ("cap", "capacity-quantity"),
    }
    assert names_per_slice(list(desired.slices)) == [["cpu-0", "cpu-1", "cpu-2"]]
