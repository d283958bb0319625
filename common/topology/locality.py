"""How close two PCI functions are, in six vendor-neutral steps (closest first), each the
claim attribute the two devices share at that step.

The steps are defined by the attributes the drivers publish (common/pciattrs.py), not by the
bridge chain, so what `topodra inspect` prints is exactly what a claim's `matchAttribute` can
align: SW means both devices carry the same `topology.topodra.io/pcieSwitch`, and so on.

LEAF  same nested switch     topology.topodra.io/pcieLeafSwitch  nvidia-smi: PIX
SW    same PCIe switch       topology.topodra.io/pcieSwitch      nvidia-smi: PIX or PXB
ROOT  same root complex      resource.kubernetes.io/pcieRoot     nvidia-smi: PHB
NUMA  same NUMA node         resource.kubernetes.io/numaNode     nvidia-smi: NODE
SOCK  same socket            topology.topodra.io/socket          nvidia-smi: SYS (no code of its own)
SYS   nothing in common, or unknown                              nvidia-smi: SYS

LEAF is shown only where switches are nested (the shared leaf switch lies below the outermost
one); with one level of switches the two attributes hold the same bridge and SW says it all.
"""

from __future__ import annotations

from enum import IntEnum

from topodra.common.records import record
from topodra.common.topology.model import PciFunction, Topology


class Locality(IntEnum):
    SELF = 0
    LEAF = 1
    SW = 2
    ROOT = 3
    NUMA = 4
    SOCK = 5
    SYS = 6

    @property
    def label(self) -> str:
        return "X" if self is Locality.SELF else self.name


@record
class Level:
    """What one code means, which attribute aligns it, and the nvidia-smi codes it covers."""

    code: str
    meaning: str
    attribute: str | None  # the claim attribute both devices share at this level
    nvidia: str  # the `nvidia-smi topo -m` codes of the same situation


LEVELS: dict[Locality, Level] = {
    Locality.SELF: Level("X", "the device itself", None, "X"),
    Locality.LEAF: Level(
        "LEAF",
        "behind the same leaf switch of nested PCIe switches: traffic crosses that switch only",
        "topology.topodra.io/pcieLeafSwitch",
        "PIX",
    ),
    Locality.SW: Level(
        "SW",
        "behind the same PCIe switch: traffic between them stays in the switch",
        "topology.topodra.io/pcieSwitch",
        "PIX (one switch) or PXB (nested switches)",
    ),
    Locality.ROOT: Level(
        "ROOT",
        "under the same PCIe root complex (host bridge), not one switch",
        "resource.kubernetes.io/pcieRoot",
        "PHB",
    ),
    Locality.NUMA: Level(
        "NUMA",
        "on the same NUMA node, different root complexes",
        "resource.kubernetes.io/numaNode",
        "NODE",
    ),
    Locality.SOCK: Level(
        "SOCK",
        "in the same socket, different NUMA nodes (SNC / NPS modes)",
        "topology.topodra.io/socket",
        "SYS (nvidia-smi has no code for it)",
    ),
    Locality.SYS: Level(
        "SYS",
        "different sockets (traffic crosses the inter-socket link), or the kernel does not say",
        None,
        "SYS",
    ),
}


def locality(t: Topology, a: PciFunction, b: PciFunction) -> Locality:
    """The closest level whose attribute `a` and `b` share (both known and equal)."""
    if a.address == b.address:
        return Locality.SELF
    if a.pcie_switch is not None and a.pcie_switch == b.pcie_switch:
        leaf = a.nested_leaf_switch
        return Locality.LEAF if leaf is not None and leaf == b.nested_leaf_switch else Locality.SW
    if a.pcie_root is not None and a.pcie_root == b.pcie_root:
        return Locality.ROOT
    if a.numa_node is not None and a.numa_node >= 0 and a.numa_node == b.numa_node:
        return Locality.NUMA
    pa, pb = t.package_of_pci(a.address), t.package_of_pci(b.address)
    if pa is not None and pb is not None and pa.index == pb.index:
        return Locality.SOCK
    return Locality.SYS
