"""Shared PCI locality attributes and device names (common/pciattrs.py), and the checkpoint
inverse of Device.to_api (common/device.py `device_from_api`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from topodra.common import pciattrs
from topodra.common.device import (
    AttributeValue,
    Capacity,
    Device,
    NodeAllocatable,
    RequestPolicy,
    Taint,
    Version,
    device_from_api,
)
from topodra.common.topology.model import PciFunction, Sriov, Topology


@pytest.mark.parametrize(
    ("address", "bus_id", "name"),
    [
        ("0000:3b:00.0", "0000:3b:00.0", "pci-0000-3b-00-0"),
        ("0000:af:1f.7", "0000:af:1f.7", "pci-0000-af-1f-7"),
        ("10000:e1:00.0", None, "pci-10000-e1-00-0"),  # VMD: upstream refuses the 5-hex domain
        ("0000:3B:00.0", None, "pci-0000-3b-00-0"),  # upstream wants lowercase
    ],
)
def test_bus_id_follows_the_upstream_regex_and_names_are_dns_labels(
    address: str, bus_id: str | None, name: str
) -> None:
    assert pciattrs.pci_bus_id(address) == bus_id
    assert pciattrs.device_name(address) == name


scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.text(max_size=64),
    st.builds(Version, st.from_regex(r"[0-9]\.[0-9]\.[0-9]", fullmatch=True)),
)
lists = st.one_of(
    st.lists(st.integers(), min_size=1, max_size=4).map(tuple),
    st.lists(st.text(max_size=8), min_size=1, max_size=4).map(tuple),
    st.lists(st.booleans(), min_size=1, max_size=4).map(tuple),
)
keys = st.from_regex(r"[a-z]{1,8}\.io/[a-zA-Z]{1,12}", fullmatch=True)


@given(
    attrs=st.dictionaries(keys, st.one_of(scalars, lists), max_size=8),
    memory=st.integers(min_value=1, max_value=2**40),
    taint=st.booleans(),
)
def test_device_from_api_inverts_to_api(attrs: dict[str, AttributeValue], memory: int, taint: bool) -> None:
    dev = Device(
        "pci-0000-3b-00-0",
        attrs,
        {
            "x.io/memory": Capacity(str(memory)),
            "x.io/cores": Capacity("8", RequestPolicy("1", min="1", max="8", step="1")),
            "x.io/slices": Capacity("4", RequestPolicy("1", valid_values=("1", "2", "4"))),
        },
        taints=(Taint("x.io/unhealthy", "DeviceRemoved"),) if taint else (),
        allow_multiple_allocations=True,
        node_allocatable={
            "cpu": NodeAllocatable(capacity_key="x.io/cores", capacity_multiplier="2"),
            "memory": NodeAllocatable(device_multiplier=f"{memory}Mi"),
        },
    )
    assert device_from_api(dev.to_api()) == dev


def test_device_from_api_rejects_a_value_without_a_known_field() -> None:
    with pytest.raises(ValueError, match="attribute value"):
        device_from_api({"name": "d", "attributes": {"x.io/a": {"float": 1.5}}})


def _fn(address: str, sriov: Sriov | None, **kw: object) -> PciFunction:
    base: dict[str, object] = dict(
        class_code=0x020000, vendor=0x15B3, device=0x101E, subsystem_vendor=0x15B3, subsystem_device=0x0071,
        numa_node=None, local_cpus=(), driver="mlx5_core", iommu_group=None, link=None, pcie_root=None,
        root_bus=None, bridges=(), pcie_switch=None, sysfs_path="",
    )  # fmt: skip
    base.update(kw)
    return PciFunction(address=address, sriov=sriov, **base)  # type: ignore[arg-type]


def _topology(*fns: PciFunction) -> Topology:
    return Topology((), (), (), (), (), fns, (), (), (), ())


def test_put_leaves_out_unknown_empty_and_over_long_strings() -> None:
    attrs: dict[str, AttributeValue] = {}
    pciattrs.put(attrs, "x.io/none", None)
    pciattrs.put(attrs, "x.io/empty", "")
    pciattrs.put(attrs, "x.io/long", "é" * 33)  # 66 bytes: over the limit although 33 characters
    pciattrs.put(attrs, "x.io/edge", "a" * 64)
    pciattrs.put(attrs, "x.io/zero", 0)
    pciattrs.put(attrs, "x.io/false", False)
    assert attrs == {"x.io/edge": "a" * 64, "x.io/zero": 0, "x.io/false": False}


def test_identity_and_sriov_attributes_of_a_pf_and_its_vfs() -> None:
    vfs = ("0000:3b:00.2", "0000:3b:00.3")
    pf = _fn("0000:3b:00.0", Sriov(8, 2, None, vfs))
    vf = _fn(vfs[1], Sriov(None, None, pf.address, ()), device=0x101F, subsystem_device=None, driver=None)
    stray = _fn("0000:3b:00.7", Sriov(None, None, pf.address, ()))  # not in the PF's virtfn list
    plain = _fn("0000:5e:00.0", None, vendor=None, class_code=None)
    topo = _topology(pf, vf, stray, plain)
    d = "nic.topodra.io"
    assert pciattrs.identity_attributes(vf, d) == {
        f"{d}/vendorId": "0x15b3",
        f"{d}/deviceId": "0x101f",
        f"{d}/pciClass": "0x020000",
        f"{d}/subsystemVendorId": "0x15b3",
    }
    assert pciattrs.identity_attributes(plain, d) == {
        f"{d}/deviceId": "0x101e",
        f"{d}/kernelDriver": "mlx5_core",
        f"{d}/subsystemVendorId": "0x15b3",
        f"{d}/subsystemDeviceId": "0x0071",
    }
    assert pciattrs.sriov_attributes(topo, pf, d) == {
        f"{d}/sriovVirtualFunction": False,
        f"{d}/sriovTotalVfs": 8,
        f"{d}/sriovNumVfs": 2,
    }
    assert pciattrs.sriov_attributes(topo, vf, d) == {
        f"{d}/sriovVirtualFunction": True,
        f"{d}/sriovPhysicalFunction": pf.address,
        f"{d}/sriovVfIndex": 1,
    }
    assert f"{d}/sriovVfIndex" not in pciattrs.sriov_attributes(topo, stray, d)
    assert pciattrs.sriov_attributes(topo, plain, d) == {f"{d}/sriovVirtualFunction": False}


def test_numa_node_only_inside_the_range_the_upstream_helper_accepts() -> None:
    """-1 (no affinity) and values past Linux's 1024 nodes are left out, never published."""
    fns = [_fn(f"0000:0{i}:00.0", None, numa_node=n) for i, n in enumerate((-1, 0, 1023, 1024, 1 << 40))]
    topo = _topology(*fns)
    got = [pciattrs.locality_attributes(topo, f).get(pciattrs.NUMA_NODE) for f in fns]
    assert got == [None, 0, 1023, None, None]
