"""Slices for every captured machine and every synthetic machine are valid and true.

Valid: the publisher's validation drops nothing and `kubernetes-validate --strict` accepts each
ResourceSlice (1.34 and 1.37 schemas). True: every network function of the tree is present
(and the uplink absent), and attribute values equal what the tree says, checked against the
fixture's expected.json / the synthetic manifest and against sysfs files read here directly,
not only against our own discovery.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from topodra.common.hostnet.uplink import find_uplinks
from topodra.common.publisher.build import build_desired
from topodra.common.topology import discover
from topodra.drivers.nic.devices import (
    DRIVER,
    Nic,
    Selection,
    build_nics,
    device_name_for_interface,
    device_name_for_pci,
    partition,
)

from tests.conftest import FixtureTrees, fixture_names
from tests.drivers.accelerator.truth import leaf_switch
from tests.drivers.nic.conftest import SYNTH_NAMES, SynthTree
from tests.kit.sysfs import basic_machine

STD = "resource.kubernetes.io"
PCI_BUS_ID = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]\Z")
SCHEMAS = ("1.34.0", "1.37.0")
NODE = "node-a"


def nics_of(root: Path, sel: Selection | None = None) -> list[Nic]:
    topo = discover(root)
    nics: list[Nic] = build_nics(topo, find_uplinks(str(root)), sel or Selection())
    return nics


def assert_valid(nics: list[Nic]) -> None:
    desired = build_desired(DRIVER, NODE, None, [n.device for n in nics])
    assert desired.problems == (), [str(p) for p in desired.problems]
    assert len(desired.devices) == len(nics)
    for obj in desired.slices:
        body = json.loads(json.dumps(obj))
        body["metadata"]["name"] = body["metadata"]["generateName"] + "abcde"
        for version in SCHEMAS:
            kubernetes_validate.validate(body, version, strict=True)
    for n in nics:
        assert len(n.device.attributes) + len(n.device.capacity) <= 32
        for v in n.device.attributes.values():
            if isinstance(v, str):
                assert len(v.encode()) <= 64


def sysfs_text(root: Path, rel: str) -> str | None:
    try:
        return (root / rel).read_bytes().decode().rstrip("\x00 \n")
    except OSError:
        return None


def upstream_pcie_root(root: Path, bdf: str) -> str | None:
    """pcieRoot as docs/design/resourceslices.md defines it, written again here: readlink the
    bus entry, first component under devices/."""
    if not PCI_BUS_ID.match(bdf):
        return None
    link = root / "sys/bus/pci/devices" / bdf
    try:
        target = os.readlink(link)
    except OSError:
        return None  # a plain folder (some captures): the model locates it by searching
    path = os.path.normpath(os.path.join("sys/bus/pci/devices", target)).lstrip("/")
    parts = path.split("/")
    if len(parts) < 3 or parts[0] != "sys" or parts[1] != "devices" or not parts[2].startswith("pci"):
        return None
    return parts[2]


def socket_index(expected: dict[str, Any], numa: int | None, local_cpus: list[int]) -> int | None:
    """Socket as an index over packages ordered by lowest CPU, from expected.json's own lists."""
    packages = sorted((p for p in expected["packages"] if p["cpus"]), key=lambda p: min(p["cpus"]))
    cpus: list[int] = []
    if numa is not None:
        cpus = next((n["cpus"] for n in expected.get("numa", []) if n["id"] == numa), [])
    for candidate in (cpus, local_cpus):
        if not candidate:
            continue
        holders = [i for i, p in enumerate(packages) if set(candidate) <= set(p["cpus"])]
        if len(holders) == 1:
            return holders[0]
    return None


def check_interface_attrs(root: Path, nic: Nic, name: str) -> None:
    attrs = nic.device.attributes
    assert attrs[f"{DRIVER}/interfaceName"] == name
    mac = sysfs_text(root, f"sys/class/net/{name}/address")
    if mac and re.fullmatch(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2})+", mac):
        assert attrs[f"{DRIVER}/macAddress"] == mac.lower()
    mtu = sysfs_text(root, f"sys/class/net/{name}/mtu")
    if mtu and mtu.isdigit():
        assert attrs[f"{DRIVER}/mtu"] == int(mtu)
    oper = sysfs_text(root, f"sys/class/net/{name}/operstate")
    if oper:
        assert attrs[f"{DRIVER}/operState"] == oper


# --- captured machines --------------------------------------------------------------------------


@pytest.mark.parametrize("name", fixture_names())
def test_captured_machine_slices_are_valid_and_true(fixture_trees: FixtureTrees, name: str) -> None:
    root = fixture_trees.root(name)
    expected = json.loads(fixture_trees.expected(name).read_text())
    nics = nics_of(root)
    assert_valid(nics)
    by_name = {n.name: n for n in nics}
    # the captures carry no proc/net/route: no uplink is known, so every function is published
    assert find_uplinks(str(root)) == frozenset()

    network = [p for p in expected["pci"] if p["class"].startswith("02") or p["class"] == "0c06"]
    for p in network:
        nic = by_name.get(device_name_for_pci(p["bdf"]))
        assert nic is not None, f"network function {p['bdf']} (class {p['class']}) is not published"
        attrs = nic.device.attributes
        assert attrs[f"{DRIVER}/pciAddress"] == p["bdf"]
        assert attrs.get(f"{STD}/pciBusID") == (p["bdf"] if PCI_BUS_ID.match(p["bdf"]) else None)
        assert attrs[f"{DRIVER}/vendorId"] == f"0x{p['vendor']}"
        assert attrs[f"{DRIVER}/deviceId"] == f"0x{p['device']}"
        assert str(attrs[f"{DRIVER}/pciClass"]).startswith(f"0x{p['class']}")
        assert attrs.get(f"{STD}/numaNode") == p["numa"]  # null (-1) means absent, never -1
        want_root = upstream_pcie_root(root, p["bdf"])
        if want_root is not None:
            assert attrs[f"{STD}/pcieRoot"] == want_root
            if want_root == p["root"]:  # no nested domain (VMD): the innermost root is the same
                assert attrs[f"{STD}/pcieRoot"] == p["root"]
        switch = p["bridges"][1] if len(p["bridges"]) >= 3 else None
        assert attrs.get("topology.topodra.io/pcieSwitch") == switch
        assert attrs.get("topology.topodra.io/pcieLeafSwitch") == leaf_switch(p)
        assert attrs.get("topology.topodra.io/socket") == socket_index(expected, p["numa"], p["local_cpus"])

    # every interface the tree puts on a network function is the one we publish for it
    net_pci = {p["bdf"] for p in network}
    for iface in expected.get("net", []):
        if iface["pci"] is None:
            continue
        nic = by_name.get(device_name_for_pci(iface["pci"]))
        if iface["pci"] in net_pci or iface["pci"] not in {p["bdf"] for p in expected["pci"]}:
            assert nic is not None, f"interface {iface['name']} ({iface['pci']}) is not published"
            names = [nic.interface, *nic.other_interfaces]
            assert iface["name"] in names
            if nic.interface == iface["name"]:
                check_interface_attrs(root, nic, iface["name"])
    # nothing else: each device is a network function of the tree (or an interface's function)
    allowed = {device_name_for_pci(b) for b in net_pci} | {
        device_name_for_pci(i["pci"]) for i in expected.get("net", []) if i["pci"]
    }
    assert set(by_name) <= allowed


def test_infiniband_controller_outside_class_02_is_published_with_rdma(fixture_trees: FixtureTrees) -> None:
    """QLogic TrueScale (class 0c06) with ib0 and qib0: a NIC although not class 0x02."""
    name = "hwloc--40intel64-2g2n4c+pcilocality"
    if name not in fixture_names():
        pytest.skip(f"{name} is not among the fixtures")
    nics = {n.name: n for n in nics_of(fixture_trees.root(name))}
    ib = nics["pci-0000-43-00-0"].device.attributes
    assert ib[f"{DRIVER}/interfaceName"] == "ib0"
    assert ib[f"{DRIVER}/rdma"] is True
    assert ib[f"{DRIVER}/rdmaDevice"] == "qib0"
    assert ib[f"{DRIVER}/linkType"] == "infiniband"
    assert ib[f"{STD}/numaNode"] == 2


def test_an_rdma_engine_of_another_class_is_published_with_its_netdev_and_verbs(tmp_path: Path) -> None:
    """An RDMA engine such as eRDMA can be a PCI function whose class says nothing of networking
    (here 0x088000, "other system peripheral"), with an RDMA device and a netdev. It is published
    for its RDMA device alone; a function of the same class without one is not a NIC."""
    tree = basic_machine(tmp_path, cpus=2)
    engine = tree.pci("pci0000:00/0000:00:06.0", class_="0x088000", vendor="0x1ded", device="0x107f")
    tree.pci("pci0000:00/0000:00:07.0", class_="0x088000", vendor="0x1ded", device="0x107f")
    tree.netdev(engine, "eth1")
    tree.rdma(engine, "erdma_0", "0216:3eff:fe01:0203")
    nics = {n.name: n for n in nics_of(tmp_path)}
    assert set(nics) == {"pci-0000-00-06-0"}
    nic = nics["pci-0000-00-06-0"]
    attrs = nic.device.attributes
    assert (attrs[f"{DRIVER}/rdma"], attrs[f"{DRIVER}/rdmaDevice"]) == (True, "erdma_0")
    assert attrs[f"{DRIVER}/interfaceName"] == "eth1" and attrs[f"{DRIVER}/linkType"] == "ethernet"
    assert [c.path for c in nic.char_devices] == ["/dev/infiniband/uverbs0"]


# --- synthetic machines -------------------------------------------------------------------------


@pytest.mark.parametrize("name", SYNTH_NAMES)
def test_synthetic_machine_slices_are_valid_and_true(
    synth_machine: Callable[[str], SynthTree], name: str
) -> None:
    """Every NIC function of the plan but the uplink, each with its attributes; SR-IOV physical
    functions with VFs only with --nic-allow-pf-with-vfs (by default the VFs alone)."""
    tree = synth_machine(name)
    m = tree.manifest
    nics = nics_of(tree.root, Selection(allow_pf_with_vfs=True))
    assert_valid(nics)
    by_name = {n.name: n for n in nics}
    uplink = m["uplink"]
    uplink_pci = {n["pci"] for n in m["net"] if n["uplink"]}
    net_by_name = {n["name"]: n for n in m["net"]}
    socket_of_node = {n["id"]: n["package"] for n in m["numa"]}
    packages = sorted((p for p in m["packages"] if p["cpus"]), key=lambda p: min(p["cpus"]))
    index_of_package = {p["id"]: i for i, p in enumerate(packages)}

    functions = [p for p in m["pci"] if p["kind"] == "nic" and p["role"] in ("endpoint", "vf")]
    assert functions, "every shipped spec has NICs"
    for p in functions:
        dev = device_name_for_pci(p["bdf"])
        if p["bdf"] in uplink_pci:
            assert dev not in by_name, f"uplink {uplink} ({p['bdf']}) must not be published"
            continue
        nic = by_name.get(dev)
        assert nic is not None, f"{p['bdf']} ({p['role']}) is not published"
        a = nic.device.attributes
        assert a[f"{STD}/pciBusID"] == p["bdf"]
        assert a[f"{STD}/pcieRoot"] == p["root"]
        assert a.get(f"{STD}/numaNode") == p["numa"]
        assert a.get("topology.topodra.io/pcieSwitch") == p["pcie_switch"]
        assert a.get("topology.topodra.io/pcieLeafSwitch") == leaf_switch(p)
        if p["numa"] is not None:
            assert a["topology.topodra.io/socket"] == index_of_package[socket_of_node[p["numa"]]]
        assert a[f"{DRIVER}/vendorId"] == f"0x{p['vendor']}"
        assert a[f"{DRIVER}/deviceId"] == f"0x{p['device']}"
        assert a[f"{DRIVER}/kernelDriver"] == p["driver"]
        assert a[f"{DRIVER}/rdma"] is (p["rdma"] is not None)
        if p["rdma"]:
            assert a[f"{DRIVER}/rdmaDevice"] == p["rdma"]
            uverbs = next(r["uverbs"] for r in m["rdma"] if r["name"] == p["rdma"])
            assert [c.path for c in nic.char_devices] == [f"/dev/infiniband/{uverbs}"]
        if p["role"] == "vf":
            assert a[f"{DRIVER}/sriovVirtualFunction"] is True
            assert a[f"{DRIVER}/sriovPhysicalFunction"] == p["physfn"]
            pf = next(q for q in m["pci"] if q["bdf"] == p["physfn"])
            assert a[f"{DRIVER}/sriovVfIndex"] == pf["virtfns"].index(p["bdf"])
        else:
            assert a[f"{DRIVER}/sriovVirtualFunction"] is False
            assert a.get(f"{DRIVER}/sriovTotalVfs") == p["sriov_totalvfs"]
        if p["netdevs"]:
            iface = net_by_name[p["netdevs"][0]]
            assert a[f"{DRIVER}/interfaceName"] == iface["name"]
            assert a[f"{DRIVER}/macAddress"] == iface["mac"]
            assert a[f"{DRIVER}/mtu"] == iface["mtu"]
            assert a.get(f"{DRIVER}/linkSpeedMbps") == iface["speed_mbps"]
            assert a[f"{DRIVER}/operState"] == iface["operstate"]
            check_interface_attrs(tree.root, nic, iface["name"])
        else:
            assert f"{DRIVER}/interfaceName" not in a
    published = {device_name_for_pci(p["bdf"]) for p in functions if p["bdf"] not in uplink_pci}
    assert set(by_name) == published
    pfs_with_vfs = {device_name_for_pci(p["bdf"]) for p in functions if p["virtfns"]}
    assert {n.name for n in nics_of(tree.root)} == published - pfs_with_vfs


def test_uplink_is_published_only_when_allowed(synth_machine: Callable[[str], SynthTree]) -> None:
    tree = synth_machine("1s-4acc")
    m = tree.manifest
    up = next(n for n in m["net"] if n["uplink"])
    topo = discover(tree.root)
    uplinks = find_uplinks(str(tree.root))
    assert up["name"] in uplinks
    names = {n.name for n in build_nics(topo, uplinks, Selection())}
    allowed = {n.name for n in build_nics(topo, uplinks, Selection(allow_uplink=True))}
    assert device_name_for_pci(up["pci"]) not in names
    assert allowed - names == {device_name_for_pci(up["pci"])}


def test_ports_and_vlan_parents_are_withheld(
    synth_machine: Callable[[str], SynthTree], tmp_path: Path
) -> None:
    """A copy of a synthetic machine on which the host stacked interfaces the way the kernel
    shows it in sysfs: one NIC a port of a bond (its `master` link, the bond's `lower_`), another
    the parent of a VLAN (its `upper_` link). Both are left out with the reason a claim gets,
    and published with allow_stacked; the rest of the machine is untouched."""
    root = tmp_path / "m"
    shutil.copytree(synth_machine("2s-8acc-8nic").root, root, symlinks=True)
    uplinks = find_uplinks(str(root))
    topo = discover(root)
    plain = [i for i in topo.net_interfaces if i.pci_address and i.name not in uplinks]
    assert len(plain) >= 2
    port, parent = plain[0], plain[1]
    net = root / "sys/devices/virtual/net"
    for name, lower in (("bond1", port), (f"{parent.name}.100", parent)):
        (net / name).mkdir(parents=True)
        (net / name / f"lower_{lower.name}").symlink_to(os.path.relpath(root / lower.sysfs_path, net / name))
        (root / "sys/class/net" / name).symlink_to(os.path.relpath(net / name, root / "sys/class/net"))
    (root / port.sysfs_path / "master").symlink_to(os.path.relpath(net / "bond1", root / port.sysfs_path))
    (root / port.sysfs_path / "upper_bond1").symlink_to(
        os.path.relpath(net / "bond1", root / port.sysfs_path)
    )
    vlan = net / f"{parent.name}.100"
    (root / parent.sysfs_path / f"upper_{vlan.name}").symlink_to(
        os.path.relpath(vlan, root / parent.sysfs_path)
    )

    stacked = discover(root)
    seen = {i.name: i for i in stacked.net_interfaces}
    assert (seen[port.name].master, seen[port.name].uppers) == ("bond1", ("bond1",))
    assert (seen[parent.name].master, seen[parent.name].uppers) == (None, (vlan.name,))
    assert seen["bond1"].master is None and seen["bond1"].is_virtual

    published, left_out = partition(stacked, uplinks, Selection())
    port_dev, parent_dev = (
        device_name_for_pci(str(port.pci_address)),
        device_name_for_pci(str(parent.pci_address)),
    )
    assert (
        left_out[port_dev] == f"interface {port.name} is a port of bond1 (--nic-allow-stacked publishes it)"
    )
    assert left_out[parent_dev].startswith(f"interface {parent.name} carries {vlan.name} ")
    before = {n.name for n in build_nics(topo, uplinks, Selection())}
    assert {n.name for n in published} == before - {port_dev, parent_dev}
    allowed = {n.name for n in build_nics(stacked, uplinks, Selection(allow_stacked=True))}
    assert allowed == before
    # virtual interfaces on request: the bond has a port (the kernel would not move it anyway);
    # the VLAN itself may go to a pod
    with_virtual, left_out = partition(stacked, uplinks, Selection(include_virtual=True))
    assert (
        left_out["net-bond1"] == f"interface bond1 has ports ({port.name}) (--nic-allow-stacked publishes it)"
    )
    assert device_name_for_interface(vlan.name) in {n.name for n in with_virtual}


def test_interface_filters(synth_machine: Callable[[str], SynthTree]) -> None:
    tree = synth_machine("2s-snc2")
    topo = discover(tree.root)
    up = find_uplinks(str(tree.root))
    everything = build_nics(topo, up, Selection())
    ib_only = build_nics(topo, up, Selection(include_interfaces=("ib*",)))
    assert ib_only and all(str(n.interface).startswith("ib") for n in ib_only)
    assert len(ib_only) < len(everything)
    no_vfs = build_nics(topo, up, Selection(exclude_interfaces=("*v[0-9]*",)))
    assert all(n.device.attributes[f"{DRIVER}/sriovVirtualFunction"] is False for n in no_vfs if n.interface)


def test_running_machine_never_publishes_its_uplink() -> None:
    """This machine's own default-route interface (when it has one) is not a device."""
    routes = Path("/proc/net/route")
    if not routes.exists():
        pytest.skip("no /proc/net/route")
    holders = {
        line.split()[0] for line in routes.read_text().splitlines()[1:] if line.split()[1:2] == ["00000000"]
    }
    nics = build_nics(discover("/"), find_uplinks("/"), Selection(include_virtual=True))
    for n in nics:
        assert n.interface not in holders
