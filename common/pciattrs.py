"""The locality attributes and device name of one PCI function, alike in every driver.

A claim lines a GPU up with its NIC through `matchAttribute` on these keys, so the NIC and the
accelerator driver must spell them identically for the same function: one function here,
used by both, rather than two copies that drift.

- `resource.kubernetes.io/pciBusID`: only for addresses the upstream helper accepts
  (docs/design/resourceslices.md: lowercase, 4-hex domain). Devices behind Intel VMD have
  5-hex domains (`10000:e1:00.0`); upstream drivers never publish those, so neither do we (the
  driver's own `pciAddress` keeps the address).
- `resource.kubernetes.io/pcieRoot`: the first folder under `sys/devices` (discovery follows the
  upstream rule); absent for hosts outside `sys/devices/pci...` (Hyper-V vPCI).
- `resource.kubernetes.io/numaNode`: only when the kernel knows it; never -1, which would match
  every other device without affinity.
- `topology.topodra.io/pcieSwitch`: the second bridge of the chain (the upstream port of the
  outermost switch).
- `topology.topodra.io/pcieLeafSwitch`: the next-to-last bridge (the upstream port of the
  innermost switch, the one the function hangs off). The same bridge as pcieSwitch unless
  switches are nested; then a GPU and a NIC on one leaf switch (PIX) match on it, and two on
  different leaves of one switch tree (PXB) only on pcieSwitch.
- `topology.topodra.io/socket`: the package index (packages ordered by lowest CPU).
- `topology.topodra.io/kind`: which driver's kind of device this is (`cpu`, `accelerator`,
  `nic`), the same for every device of a driver. Constraints compare attributes, never drivers:
  a `matchAttribute` on this key fails exactly when two requests' devices come from different
  drivers, which is how a claim ties the fallback levels of its accelerator and NIC requests
  together (docs/design/prioritized-placement.md).

Also the driver-domain attributes every PCI driver publishes the same way under its own domain
(`<domain>/vendorId`, `sriovPhysicalFunction`, ...), and `put`, the rule for setting one.
"""

from __future__ import annotations

import re

from topodra.common.device import AttributeValue
from topodra.common.topology.model import PciFunction, Topology

STD = "resource.kubernetes.io"
TOPO = "topology.topodra.io"
PCI_BUS_ID = f"{STD}/pciBusID"
PCIE_ROOT = f"{STD}/pcieRoot"
NUMA_NODE = f"{STD}/numaNode"
PCIE_SWITCH = f"{TOPO}/pcieSwitch"
PCIE_LEAF_SWITCH = f"{TOPO}/pcieLeafSwitch"
SOCKET = f"{TOPO}/socket"
KIND = f"{TOPO}/kind"

# What upstream's GetPCIBusIDAttribute accepts: lowercase, 4-hex domain, 2-hex bus and device,
# 1-hex function.
UPSTREAM_BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]\Z")
MAX_STRING = 64  # the API's limit on a string attribute value, in bytes
# The upstream numaNode helper refuses nodes outside 0..1023 (Linux has at most 1024): a value
# read from a broken or planted tree is left out, as that helper would leave it out.
MAX_NUMA_NODE = 1023


def device_name(address: str) -> str:
    """`0000:3b:00.0` -> `pci-0000-3b-00-0`: a DNS label that survives reboots and rebinds
    (also for 5-hex VMD domains)."""
    return "pci-" + re.sub(r"[:.]", "-", address.lower())


def pci_bus_id(address: str) -> str | None:
    """The pciBusID value, or None when upstream would refuse the address."""
    return address if UPSTREAM_BDF.match(address) else None


class _Unreadable(Exception):
    pass


def _node_package(topo: Topology, node: int) -> int | None:
    """Socket of a node as the upstream helper reads it: that of the first CPU of its cpulist
    (offline CPUs included). None: the node has no CPUs (a memory node), socket unknown.
    _Unreadable: the node or its first CPU's package cannot be read, and upstream then falls
    back to the scalar-like [N]. Sockets are package indexes, not `physical_package_id`, which
    repeats or is -1 on some machines (the `socket` attribute is that index too)."""
    info = topo.numa_node(node)
    if info is None:
        raise _Unreadable(f"node{node}")
    cpus = info.all_cpus or info.cpus
    if not cpus:
        return None
    c = topo.cpu(cpus[0])
    if c is None or c.package is None:
        raise _Unreadable(f"cpu{cpus[0]}")
    return c.package


def numa_list(topo: Topology, node: int) -> tuple[int, ...]:
    """The list form of numaNode (docs/design/resourceslices.md): the node, then the other nodes
    at the minimum SLIT distance that are not known to sit on another socket, ascending; just
    the node when any of that cannot be read."""
    info = topo.numa_node(node)
    if info is None:
        return (node,)
    others = [(k, d) for k, d in info.distances if k != node]
    if not others:
        return (node,)
    nearest = min(d for _, d in others)
    near = []
    try:
        own = _node_package(topo, node)
        for k, d in others:
            if d != nearest:
                continue
            theirs = _node_package(topo, k)
            if theirs is not None and own is not None and theirs != own:
                continue
            if 0 <= k <= MAX_NUMA_NODE:
                near.append(k)
    except _Unreadable:
        return (node,)
    return (node, *sorted(near))


def locality_attributes(topo: Topology, fn: PciFunction, *, lists: bool = False) -> dict[str, AttributeValue]:
    """pciBusID, pcieRoot, numaNode, pcieSwitch, pcieLeafSwitch and socket of `fn`, each only
    when known; numaNode in its list form with `lists` (`numa_list`, needs
    DRAListTypeAttributes)."""
    attrs: dict[str, AttributeValue] = {}
    bus_id = pci_bus_id(fn.address)
    if bus_id is not None:
        attrs[PCI_BUS_ID] = bus_id
    if fn.pcie_root and len(fn.pcie_root) <= MAX_STRING:
        attrs[PCIE_ROOT] = fn.pcie_root
    if fn.numa_node is not None and 0 <= fn.numa_node <= MAX_NUMA_NODE:
        attrs[NUMA_NODE] = numa_list(topo, fn.numa_node) if lists else fn.numa_node
    if fn.pcie_switch and len(fn.pcie_switch) <= MAX_STRING:
        attrs[PCIE_SWITCH] = fn.pcie_switch
    leaf = fn.pcie_leaf_switch
    if leaf and len(leaf) <= MAX_STRING:
        attrs[PCIE_LEAF_SWITCH] = leaf
    pkg = topo.package_of_pci(fn.address)
    if pkg is not None:
        attrs[SOCKET] = pkg.index
    return attrs


def put(attrs: dict[str, AttributeValue], key: str, value: AttributeValue | None) -> None:
    """Set an attribute when known; an empty string or one over MAX_STRING is left out, never
    cut (a cut value would lie to selectors; a driver cuts only what it knows is prose)."""
    if value is None:
        return
    if isinstance(value, str) and (not value or len(value.encode()) > MAX_STRING):
        return
    attrs[key] = value


def identity_attributes(fn: PciFunction, domain: str) -> dict[str, AttributeValue]:
    """vendorId, deviceId, subsystemVendorId, subsystemDeviceId ("0x10de"), pciClass
    ("0x030200") and kernelDriver under `domain`, each only when known."""
    attrs: dict[str, AttributeValue] = {}
    put(attrs, f"{domain}/vendorId", fn.vendor_hex)
    put(attrs, f"{domain}/deviceId", fn.device_hex)
    put(attrs, f"{domain}/pciClass", fn.class_hex)
    put(attrs, f"{domain}/kernelDriver", fn.driver)
    if fn.subsystem_vendor is not None:
        attrs[f"{domain}/subsystemVendorId"] = f"0x{fn.subsystem_vendor:04x}"
    if fn.subsystem_device is not None:
        attrs[f"{domain}/subsystemDeviceId"] = f"0x{fn.subsystem_device:04x}"
    return attrs


def sriov_attributes(topo: Topology, fn: PciFunction, domain: str) -> dict[str, AttributeValue]:
    """sriovVirtualFunction always; a VF's sriovPhysicalFunction and sriovVfIndex (its place in
    the PF's virtfnN list), or a PF's sriovTotalVfs and sriovNumVfs."""
    sriov = fn.sriov
    physfn = sriov.physfn if sriov is not None else None
    attrs: dict[str, AttributeValue] = {f"{domain}/sriovVirtualFunction": physfn is not None}
    if physfn is not None:
        attrs[f"{domain}/sriovPhysicalFunction"] = physfn
        pf = topo.pci(physfn)
        if pf is not None and pf.sriov is not None and fn.address in pf.sriov.virtfns:
            attrs[f"{domain}/sriovVfIndex"] = pf.sriov.virtfns.index(fn.address)
    elif sriov is not None:
        put(attrs, f"{domain}/sriovTotalVfs", sriov.total_vfs)
        put(attrs, f"{domain}/sriovNumVfs", sriov.num_vfs)
    return attrs
