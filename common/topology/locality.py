"""How close two PCI functions are, in five vendor-neutral steps (closest first).

SW    share a PCIe switch (a bridge below the root port: the chains agree on two or more bridges)
ROOT  same root complex
NUMA  same NUMA node
SOCK  same socket (package)
SYS   across sockets, or nothing is known
"""

from __future__ import annotations

from enum import IntEnum

from topodra.common.topology.model import PciFunction, Topology


class Locality(IntEnum):
    SELF = 0
    SW = 1
    ROOT = 2
    NUMA = 3
    SOCK = 4
    SYS = 5

    @property
    def label(self) -> str:
        return "X" if self is Locality.SELF else self.name


def _common_prefix(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def locality(t: Topology, a: PciFunction, b: PciFunction) -> Locality:
    if a.address == b.address:
        return Locality.SELF
    # two functions of one device, or two devices under one switch, share every bridge but the last
    # (an unknown chain shares nothing)
    if a.bridges and b.bridges and _common_prefix(a.bridges, b.bridges) >= 2 and a.root_bus == b.root_bus:
        return Locality.SW
    root_a = a.pcie_root or a.root_bus
    if root_a is not None and root_a == (b.pcie_root or b.root_bus):
        return Locality.ROOT
    if a.numa_node is not None and a.numa_node == b.numa_node:
        return Locality.NUMA
    pa, pb = t.package_of_pci(a.address), t.package_of_pci(b.address)
    if pa is not None and pb is not None and pa.index == pb.index:
        return Locality.SOCK
    return Locality.SYS
