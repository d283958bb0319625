"""PCI, network and RDMA discovery on small hand-made trees, one trap per test."""

from __future__ import annotations

from pathlib import Path

from topodra.common.pciattrs import PCIE_LEAF_SWITCH, PCIE_SWITCH, locality_attributes
from topodra.common.topology import discover
from topodra.common.topology.locality import Locality, locality
from topodra.common.topology.model import PciFunction, Topology

from tests.kit.sysfs import Tree, basic_machine

RP = "pci0000:00/0000:00:01.0"  # a root port
USP = f"{RP}/0000:01:00.0"  # switch upstream port
DSP1 = f"{USP}/0000:02:00.0"  # switch downstream ports
DSP2 = f"{USP}/0000:02:01.0"


def fn(t: Topology, address: str) -> PciFunction:
    p = t.pci(address)
    assert p is not None, f"{address} not discovered"
    return p


def switch_machine(root: Path) -> Tree:
    """2 packages; root 0 holds a switch with a GPU and a NIC; root 1 holds a NIC on node 1."""
    tree = basic_machine(root, cpus=8, packages=2)
    tree.pci(RP, class_="0x060400", numa="0", local_cpus="0f")
    tree.pci(USP, class_="0x060400", numa="0", local_cpus="0f")
    tree.pci(DSP1, class_="0x060400", numa="0", local_cpus="0f")
    tree.pci(DSP2, class_="0x060400", numa="0", local_cpus="0f")
    gpu = tree.pci(f"{DSP1}/0000:03:00.0", class_="0x030200", vendor="0x10de", numa="0", local_cpus="0f")
    tree.file(f"{gpu}/drm/card1/dev", "226:1").file(f"{gpu}/drm/renderD129/dev", "226:129")
    nic = tree.pci(f"{DSP2}/0000:04:00.0", numa="0", local_cpus="0f", driver="ixgbe")
    tree.netdev(nic, "eth0")
    tree.pci("pci0000:80/0000:80:00.0", class_="0x060400", numa="1", local_cpus="f0")
    nic2 = tree.pci("pci0000:80/0000:80:00.0/0000:81:00.0", numa="1", local_cpus="f0")
    tree.netdev(nic2, "eth1")
    tree.file("sys/devices/pci0000:80/pci_bus/0000:80/cpulistaffinity", "4-7")
    return tree


def test_bridges_root_and_switch(tmp_path: Path) -> None:
    switch_machine(tmp_path)
    t = discover(tmp_path)
    gpu = fn(t, "0000:03:00.0")
    assert gpu.pcie_root == gpu.root_bus == "pci0000:00"
    assert gpu.bridges == ("0000:00:01.0", "0000:01:00.0", "0000:02:00.0")
    assert gpu.pcie_switch == gpu.pcie_leaf_switch == "0000:01:00.0"  # one level of switches
    assert gpu.class_hex == "0x030200" and gpu.vendor_hex == "0x10de" and gpu.in_accelerator_class
    assert [(n.kind, n.name, n.major, n.minor, n.dev_path) for n in gpu.device_nodes] == [
        ("drm-card", "card1", 226, 1, "/dev/dri/card1"),
        ("drm-render", "renderD129", 226, 129, "/dev/dri/renderD129"),
    ]
    assert fn(t, "0000:00:01.0").bridges == () and fn(t, "0000:00:01.0").pcie_switch is None
    assert fn(t, "0000:02:00.0").pcie_switch is None  # only two bridges above it
    assert fn(t, "0000:81:00.0").bridges == ("0000:80:00.0",)
    assert t.accelerators() == (gpu,)


def test_leaf_switch_is_the_innermost_switch_and_the_outermost_one_without_nesting(tmp_path: Path) -> None:
    """Root port 00:01.0, top switch 01:00.0 with downstream ports 02:00.0 and 02:01.0. Behind
    02:00.0 a leaf switch 05:00.0 holds a GPU and a NIC; a second NIC sits on 02:01.0 itself.
    The GPU and its leaf's NIC share the leaf (LEAF); the other NIC only the top switch (SW),
    whose own leaf switch is the top switch (one level above it)."""
    tree = basic_machine(tmp_path, cpus=4)
    top_down = f"{USP}/0000:02:00.0"
    leaf_up = f"{top_down}/0000:05:00.0"
    for bridge in (
        RP,
        USP,
        top_down,
        f"{USP}/0000:02:01.0",
        leaf_up,
        f"{leaf_up}/0000:06:00.0",
        f"{leaf_up}/0000:06:01.0",
    ):
        tree.pci(bridge, class_="0x060400", numa="0", local_cpus="f")
    tree.pci(
        f"{leaf_up}/0000:06:00.0/0000:07:00.0", class_="0x030200", vendor="0x10de", numa="0", local_cpus="f"
    )
    tree.netdev(tree.pci(f"{leaf_up}/0000:06:01.0/0000:08:00.0", numa="0", local_cpus="f"), "eth0")
    tree.netdev(tree.pci(f"{USP}/0000:02:01.0/0000:09:00.0", numa="0", local_cpus="f"), "eth1")
    t = discover(tmp_path)
    gpu, near, far = fn(t, "0000:07:00.0"), fn(t, "0000:08:00.0"), fn(t, "0000:09:00.0")
    assert gpu.bridges == ("0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:05:00.0", "0000:06:00.0")
    assert (gpu.pcie_switch, gpu.pcie_leaf_switch) == ("0000:01:00.0", "0000:05:00.0")
    assert (near.pcie_switch, near.pcie_leaf_switch) == ("0000:01:00.0", "0000:05:00.0")
    assert (far.pcie_switch, far.pcie_leaf_switch) == ("0000:01:00.0", "0000:01:00.0")
    assert locality(t, gpu, near) is Locality.LEAF
    assert locality(t, gpu, far) is Locality.SW and locality(t, near, far) is Locality.SW
    assert fn(t, "0000:02:01.0").pcie_leaf_switch is None  # two bridges above it: no switch
    attrs = locality_attributes(t, gpu)
    assert attrs[PCIE_LEAF_SWITCH] == "0000:05:00.0" and attrs[PCIE_SWITCH] == "0000:01:00.0"
    assert locality_attributes(t, far)[PCIE_LEAF_SWITCH] == "0000:01:00.0"
    assert PCIE_LEAF_SWITCH not in locality_attributes(t, fn(t, "0000:02:01.0"))


def test_locality_classes_and_socket_lookups(tmp_path: Path) -> None:
    switch_machine(tmp_path)
    t = discover(tmp_path)
    gpu, nic, nic2 = fn(t, "0000:03:00.0"), fn(t, "0000:04:00.0"), fn(t, "0000:81:00.0")
    assert locality(t, gpu, nic) is Locality.SW
    assert locality(t, gpu, fn(t, "0000:00:01.0")) is Locality.ROOT
    assert locality(t, gpu, nic2) is Locality.SYS
    assert locality(t, gpu, gpu) is Locality.SELF
    assert t.package_of_pci("0000:81:00.0") == t.packages[1]
    assert t.package_of_pci("0000:03:00.0") == t.packages[0]
    roots = {r.name: r for r in t.pcie_roots}
    assert roots["pci0000:80"].cpus == (4, 5, 6, 7)  # from cpulistaffinity
    assert roots["pci0000:00"].cpus == (0, 1, 2, 3)  # from its devices' local_cpus
    assert t.pcie_roots_local_to([5]) == ("pci0000:80",)
    assert t.pcie_roots_local_to(t.cpus_of_numa(0)) == ("pci0000:00",)


def test_package_of_pci_falls_back_on_local_cpus_when_numa_is_unknown(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path, cpus=8, packages=2)
    tree.pci("pci0000:00/0000:00:02.0", numa="-1", local_cpus="f0")
    tree.pci("pci0000:00/0000:00:03.0", numa="-1", local_cpus="ff")
    t = discover(tmp_path)
    assert fn(t, "0000:00:02.0").numa_node is None
    assert t.package_of_pci("0000:00:02.0") == t.packages[1]
    assert t.package_of_pci("0000:00:03.0") is None  # spans both sockets: unknown
    assert t.pcie_roots_local_to([0]) == ()  # affinity covers everything: says nothing


def test_32bit_domain_vmd_and_trailing_slash_links(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path, cpus=2)
    tree.pci("pci0000:00/0000:00:0e.0", class_="0x010400", trailing_slash=True)
    vmd = "pci0000:00/0000:00:0e.0/pci10000:00"
    tree.pci(f"{vmd}/10000:00:02.0", class_="0x060400", trailing_slash=True)
    tree.pci(f"{vmd}/10000:00:02.0/10000:01:00.0", class_="0x010802")
    tree.pci("pci10000:80/10000:80:00.0", class_="0x010802")  # a 5-hex domain at the top
    t = discover(tmp_path)
    nvme = fn(t, "10000:01:00.0")
    assert nvme.pcie_root == "pci0000:00"  # the upstream pcieRoot rule
    assert nvme.root_bus == "pci10000:00"  # the innermost root folder
    assert nvme.bridges == ("10000:00:02.0",)
    assert fn(t, "0000:00:0e.0").sysfs_path == "sys/devices/pci0000:00/0000:00:0e.0"
    assert fn(t, "10000:80:00.0").pcie_root == "pci10000:80"
    addresses = [p.address for p in t.pci_devices]
    assert addresses == ["0000:00:0e.0", "10000:00:02.0", "10000:01:00.0", "10000:80:00.0"]


def test_uppercase_addresses_are_lowercased(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path, cpus=2)
    tree.pci("pci0000:AF/0000:AF:00.0")
    t = discover(tmp_path)
    assert fn(t, "0000:af:00.0").root_bus == "pci0000:af"
    assert t.pci("0000:AF:00.0") is not None


def test_dangling_bus_link_is_listed_with_a_warning(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path, cpus=2)
    tree.link("sys/bus/pci/devices/0000:05:00.0", "sys/devices/pci0000:00/0000:00:1c.0/0000:05:00.0")
    t = discover(tmp_path)
    p = fn(t, "0000:05:00.0")
    assert p.vendor is None and p.class_code is None
    assert p.root_bus == "pci0000:00" and p.bridges == ("0000:00:1c.0",)
    assert any(w.path == "sys/bus/pci/devices/0000:05:00.0" and "dangling" in w.message for w in t.warnings)


def test_bus_entry_that_is_a_real_folder(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path, cpus=2)
    # copied instead of linked, with the real device also present under devices/
    tree.pci("pci0000:00/0000:00:1c.0", class_="0x060400")
    tree.pci("pci0000:00/0000:00:1c.0/0000:06:00.0", bus_link=False)
    d = "sys/bus/pci/devices/0000:06:00.0"
    tree.file(f"{d}/class", "0x020000").file(f"{d}/vendor", "0x15b3").file(f"{d}/device", "0x1017")
    # and one that exists nowhere else
    e = "sys/bus/pci/devices/0000:07:00.0"
    tree.file(f"{e}/class", "0x030000").file(f"{e}/vendor", "0x1af4").file(f"{e}/device", "0x1050")
    t = discover(tmp_path)
    p = fn(t, "0000:06:00.0")
    assert p.vendor == 0x15B3  # attributes from the folder the bus lists
    assert p.root_bus == "pci0000:00" and p.bridges == ("0000:00:1c.0",)
    q = fn(t, "0000:07:00.0")
    # its place is unknown: no root, and no chain either (an empty chain would say "on a root port")
    assert q.vendor == 0x1AF4 and q.root_bus is None and q.pcie_root is None and q.bridges is None
    assert q.pcie_switch is None


def test_missing_config_and_local_cpus_beyond_existing_cpus(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path, cpus=2)
    tree.pci("pci0000:00/0000:00:03.0", local_cpus="ffffffff,ffffffff", numa="-1")
    t = discover(tmp_path)
    p = fn(t, "0000:00:03.0")
    assert p.local_cpus == (0, 1)
    assert p.numa_node is None
    assert t.warnings == ()


def test_pci_garbage_becomes_none_and_a_warning(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path, cpus=2)
    d = tree.pci("pci0000:00/0000:00:03.0")
    tree.file(f"{d}/class", "network").file(f"{d}/numa_node", "zero").file(f"{d}/local_cpus", "all of them")
    (tmp_path / d / "vendor").unlink()
    t = discover(tmp_path)
    p = fn(t, "0000:00:03.0")
    assert p.class_code is None and p.vendor is None and p.numa_node is None and p.local_cpus == ()
    paths = {w.path for w in t.warnings}
    assert {f"{d}/class", f"{d}/numa_node", f"{d}/local_cpus", f"{d}/vendor"} <= paths


def test_sriov_pf_and_vfs(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path, cpus=2)
    pf = tree.pci("pci0000:00/0000:00:02.0/0000:03:00.0", numa="0", driver="mlx5_core")
    tree.file(f"{pf}/sriov_totalvfs", "8").file(f"{pf}/sriov_numvfs", "2")
    for i in range(2):
        vf = tree.pci(f"pci0000:00/0000:00:02.0/0000:03:00.{i + 2}", numa="0")
        tree.link(f"{pf}/virtfn{i}", vf).link(f"{vf}/physfn", pf)
        tree.netdev(vf, f"eth{i + 1}")
    tree.netdev(pf, "eth0")
    t = discover(tmp_path)
    p = fn(t, "0000:03:00.0")
    assert p.sriov is not None and p.sriov.role == "pf"
    assert (p.sriov.total_vfs, p.sriov.num_vfs, p.sriov.virtfns) == (8, 2, ("0000:03:00.2", "0000:03:00.3"))
    vf = fn(t, "0000:03:00.2")
    assert vf.sriov is not None and vf.sriov.role == "vf" and vf.sriov.physfn == "0000:03:00.0"
    roles = {i.name: i.sriov_role for i in t.net_interfaces}
    assert roles == {"eth0": "pf", "eth1": "vf", "eth2": "vf"}


def test_link_speed_width_aer_and_iommu_group(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path, cpus=2)
    d = tree.pci("pci0000:00/0000:00:02.0")
    tree.file(f"{d}/current_link_speed", "16.0 GT/s PCIe").file(f"{d}/current_link_width", "8")
    tree.file(f"{d}/max_link_speed", "16.0 GT/s PCIe").file(f"{d}/max_link_width", "16")
    tree.file(f"{d}/aer_dev_fatal", "Undefined 0\nDLP 1\nTOTAL_ERR_FATAL 1")
    tree.link(f"{d}/iommu_group", "sys/kernel/iommu_groups/17")
    t = discover(tmp_path)
    p = fn(t, "0000:00:02.0")
    assert p.link is not None and (p.link.current_width, p.link.max_width) == (8, 16)
    assert p.link.current_speed == "16.0 GT/s PCIe"
    assert p.aer_fatal_total == 1 and p.iommu_group == 17


def test_vfio_and_accel_nodes(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path, cpus=2)
    d = tree.pci("pci0000:00/0000:00:04.0", class_="0x120000", driver="vfio-pci")
    tree.link(f"{d}/iommu_group", "sys/kernel/iommu_groups/9")
    tree.file("sys/class/vfio/9/dev", "243:0")
    tree.file(f"{d}/vfio-dev/vfio0/dev", "511:0")
    a = tree.pci("pci0000:00/0000:00:05.0", class_="0x120000", driver="habanalabs")
    tree.file(f"{a}/accel/accel0/dev", "261:0")
    t = discover(tmp_path)
    kinds = [(n.kind, n.dev_path, n.major) for n in t.device_nodes_of("0000:00:04.0")]
    assert kinds == [("vfio-group", "/dev/vfio/9", 243), ("vfio-device", "/dev/vfio/devices/vfio0", 511)]
    assert [(n.kind, n.dev_path, n.minor) for n in t.device_nodes_of("0000:00:05.0")] == [
        ("accel", "/dev/accel/accel0", 0)
    ]


def test_net_interfaces_virtual_usb_and_plain_folders(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path, cpus=2)
    xhci = tree.pci("pci0000:00/0000:00:14.0", class_="0x0c0330")
    tree.netdev(f"{xhci}/usb2/2-1/2-1:1.0", "enx001122", speed="-1")
    lo = "sys/devices/virtual/net/lo"
    tree.file(f"{lo}/address", "00:00:00:00:00:00").file(f"{lo}/mtu", "65536")
    tree.file(f"{lo}/operstate", "unknown")
    tree.link("sys/class/net/lo", lo)
    # a capture that copied the interface folder instead of linking it
    nic = tree.pci("pci0000:00/0000:00:1f.6")
    tree.file("sys/class/net/eth9/address", "AA:BB:CC:DD:EE:FF").file("sys/class/net/eth9/speed", "")
    tree.link("sys/class/net/eth9/device", nic, trailing_slash=True)
    t = discover(tmp_path)
    nets = {i.name: i for i in t.net_interfaces}
    assert nets["enx001122"].pci_address == "0000:00:14.0" and not nets["enx001122"].is_virtual
    assert nets["enx001122"].speed_mbps is None  # -1: link down
    assert nets["lo"].pci_address is None and nets["lo"].is_virtual and nets["lo"].mtu == 65536
    assert nets["eth9"].pci_address == "0000:00:1f.6" and nets["eth9"].mac == "aa:bb:cc:dd:ee:ff"
    assert nets["eth9"].speed_mbps is None
    assert t.nets_of_pci("0000:00:1f.6") == (nets["eth9"],)
    assert t.warnings == ()


def test_net_interfaces_say_how_they_are_stacked(tmp_path: Path) -> None:
    """`master` and `upper_*` links as the kernel writes them (relative, into
    sys/devices/virtual/net): a bond port, a VLAN parent; the bond and the VLAN themselves have
    only `lower_*` links, which say nothing new."""
    tree = basic_machine(tmp_path, cpus=2)
    port = tree.netdev(tree.pci("pci0000:00/0000:00:03.0"), "eno1")
    parent = tree.netdev(tree.pci("pci0000:00/0000:00:03.1"), "eno2", mac="00:11:22:33:44:56")
    bond, vlan = "sys/devices/virtual/net/bond0", "sys/devices/virtual/net/eno2.7"
    for d in (bond, vlan):
        tree.file(f"{d}/address", "00:11:22:33:44:55")
        tree.link(f"sys/class/net/{d.rpartition('/')[2]}", d)
    tree.link(f"{port}/master", bond).link(f"{port}/upper_bond0", bond).link(f"{bond}/lower_eno1", port)
    tree.link(f"{parent}/upper_eno2.7", vlan).link(f"{vlan}/lower_eno2", parent)
    nets = {i.name: i for i in discover(tmp_path).net_interfaces}
    assert (nets["eno1"].master, nets["eno1"].uppers) == ("bond0", ("bond0",))
    assert (nets["eno2"].master, nets["eno2"].uppers) == (None, ("eno2.7",))
    assert (nets["bond0"].master, nets["bond0"].uppers) == (None, ())
    assert (nets["eno2.7"].master, nets["eno2.7"].uppers) == (None, ())


def test_rdma_devices_and_their_character_nodes(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path, cpus=2)
    d = tree.pci("pci0000:00/0000:00:02.0/0000:03:00.0", class_="0x020700", vendor="0x15b3", numa="0")
    tree.netdev(d, "ib0")
    tree.rdma(d, "mlx5_0", "0c42:a103:0065:0e3e")
    um = f"{d}/infiniband_mad/umad0"
    tree.file(f"{um}/ibdev", "mlx5_0").file(f"{um}/dev", "231:0")
    tree.link("sys/class/infiniband_mad/umad0", um)
    t = discover(tmp_path)
    (r,) = t.rdma_of_pci("0000:03:00.0")
    assert r.name == "mlx5_0" and r.net_interfaces == ("ib0",) and r.node_guid == "0c42:a103:0065:0e3e"
    assert [(n.kind, n.dev_path, n.major, n.minor) for n in r.device_nodes] == [
        ("uverbs", "/dev/infiniband/uverbs0", 231, 192),
        ("umad", "/dev/infiniband/umad0", 231, 0),
    ]
    ib0 = t.net("ib0")
    assert ib0 is not None and ib0.rdma_devices == ("mlx5_0",)


def test_no_pci_at_all(tmp_path: Path) -> None:
    basic_machine(tmp_path, cpus=2)
    t = discover(tmp_path)
    assert t.pci_devices == () and t.pcie_roots == () and t.net_interfaces == ()


def test_hosts_outside_devices_pci_have_no_upstream_pcie_root(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path, cpus=2)
    hv = "LNXSYSTM:00/LNXSYBUS:00/PNP0A03:00/device:07/VMBUS:01/47505500-0001-0000-3130-444531303244"
    tree.pci(f"{hv}/pci7870:00/7870:00:00.0", class_="0x020000")  # Hyper-V vPCI
    tree.pci("platform/soc/1000.pcie/pci0000:00/0000:00:00.0", class_="0x060400")  # an ARM SoC host
    t = discover(tmp_path)
    hyperv, soc = fn(t, "7870:00:00.0"), fn(t, "0000:00:00.0")
    assert hyperv.pcie_root is None and hyperv.root_bus == "pci7870:00"
    assert soc.pcie_root is None and soc.root_bus == "pci0000:00"
    assert t.pcie_roots == ()
