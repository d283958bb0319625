"""What the machine says a matched device's locality is, from topodra's discovery.

The values are read from the discovered `Topology` directly (a PCI function's `pcie_root`,
`numa_node`, `pcie_switch`, `pcie_leaf_switch`, its package), not through the functions
topodra's drivers publish with, so that a driver bug (topodra's own included) shows up as a
disagreement.

For a PCI function: its address in the upstream form (none for 5-hex VMD domains, which upstream
cannot express), its root complex, its NUMA node (unknown when the kernel says -1), the switches
it sits behind (outermost and innermost) and its socket. For a set of CPUs (a CPU driver's
device): the one NUMA node and socket of all of them (unknown when they span several), and the
roots whose CPU affinity overlaps them, which is what a list-valued pcieRoot on a CPU device
means.
"""

from __future__ import annotations

from dataclasses import dataclass

from topodra.common.check.identity import Identity
from topodra.common.pciattrs import UPSTREAM_BDF
from topodra.common.topology.model import Topology
from topodra.common.topology.parse import compress


@dataclass(frozen=True, slots=True)
class Truth:
    where: str  # what the device is on the machine, for people: "PCI 0000:3b:00.0", "NUMA node 0"
    found: bool  # False: the device could not be matched, nothing below is known
    is_pci: bool
    pci_bus_id: str | None = None
    pcie_root: str | None = None
    local_roots: tuple[str, ...] = ()  # CPU devices: roots local to its CPUs
    numa: int | None = None
    numa_unknown_why: str = ""  # why `numa` is None for a device that has a place
    switch: str | None = None
    leaf_switch: str | None = None
    socket: int | None = None
    # CPU devices matched by a NUMA node that spans sockets (socket None): those sockets. The
    # device may hold only some of the node's CPUs (the rest reserved or kept shared), all on one
    # of them: a published socket among them cannot be told wrong from the slice alone.
    sockets: tuple[int, ...] = ()
    single_node: int | None = None  # the machine's only NUMA node, when it has exactly one

    @property
    def has_cpus(self) -> bool:
        return not self.is_pci and bool(self.local_roots or self.numa is not None or self.socket is not None)


def truth_of(topo: Topology, ident: Identity) -> Truth:
    single = topo.numa_nodes[0].id if len(topo.numa_nodes) == 1 else None
    if ident.kind == "pci" and ident.pci is not None:
        fn = topo.pci(ident.pci)
        if fn is not None:
            pkg = topo.package_of_pci(fn.address)
            return Truth(
                where=f"PCI {fn.address}",
                found=True,
                is_pci=True,
                pci_bus_id=fn.address if UPSTREAM_BDF.match(fn.address) else None,
                pcie_root=fn.pcie_root,
                numa=fn.numa_node if fn.numa_node is not None and fn.numa_node >= 0 else None,
                numa_unknown_why="the kernel reports no NUMA node for it (numa_node -1)",
                switch=fn.pcie_switch,
                leaf_switch=fn.pcie_leaf_switch,
                socket=pkg.index if pkg is not None else None,
                single_node=single,
            )
    if ident.kind == "interface":
        return Truth(
            where=f"virtual interface {ident.interface}", found=True, is_pci=False, single_node=single
        )
    if ident.kind in ("cpus", "numa", "socket") and ident.cpus:
        cpus = ident.cpus
        nodes = sorted({n for c in cpus if (n := topo.numa_of_cpu(c)) is not None})
        packages = sorted(
            {c.package for n in cpus if (c := topo.cpu(n)) is not None and c.package is not None}
        )
        numa = ident.numa if ident.numa is not None else (nodes[0] if len(nodes) == 1 else None)
        where = f"NUMA node {ident.numa}" if ident.kind == "numa" else f"CPUs {compress(cpus)}"
        if ident.kind == "socket":
            where = f"socket {ident.socket}"
        return Truth(
            where=where,
            found=True,
            is_pci=False,
            local_roots=topo.pcie_roots_local_to(cpus),
            numa=numa,
            numa_unknown_why=f"its CPUs span NUMA nodes {nodes}" if len(nodes) > 1 else "no NUMA node",
            socket=packages[0] if len(packages) == 1 else None,
            sockets=tuple(packages) if len(packages) > 1 and ident.kind == "numa" else (),
            single_node=single,
        )
    if ident.kind in ("numa", "socket"):  # a CPU-less node (memory only) or an empty package
        return Truth(
            where=f"NUMA node {ident.numa}", found=True, is_pci=False, numa=ident.numa, single_node=single
        )
    return Truth(where="not found on this machine", found=False, is_pci=False, single_node=single)
