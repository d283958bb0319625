"""`discover(root)`: the whole machine from one sysfs tree, as immutable data.

Pure apart from reading files under `root`; never raises on bad sysfs content (bad files become
None plus a `Topology.warnings` entry). `root` is the folder that contains `sys/` (and maybe
`proc/`): "/" for the running machine, or an unpacked capture.
"""

from __future__ import annotations

import os

from topodra.common.topology import cpu, net, numa, pci
from topodra.common.topology.model import NumaNode, Topology
from topodra.common.topology.reader import SysfsReader


class NotASysfsTree(ValueError):
    """The root has no sys/devices/system/cpu: nothing here describes a machine."""


def check_root(root: str | os.PathLike[str], reader: SysfsReader | None = None) -> None:
    """Raises NotASysfsTree unless sys/devices/system/cpu is a folder beneath `root` (looked up
    as the reader resolves paths: a `sys` link out of a capture does not count)."""
    try:
        r = SysfsReader(root) if reader is None else reader
    except OSError as e:
        raise NotASysfsTree(f"{os.fspath(root)!s} is not a sysfs root: {e.strerror}") from None
    if not r.is_dir("sys/devices/system/cpu"):
        raise NotASysfsTree(f"{os.fspath(root)!s} is not a sysfs root: no sys/devices/system/cpu in it")


def _numa_of_cpus(nodes: tuple[NumaNode, ...]) -> dict[int, int]:
    # Buggy firmware can list one CPU in several nodes: the lowest node wins, as for packages.
    # Offline CPUs keep their node too (all_cpus), so a user sees where they would come back.
    out: dict[int, int] = {}
    for node in nodes:
        for c in node.all_cpus:
            out.setdefault(c, node.id)
    return out


def discover_with(r: SysfsReader) -> Topology:
    """Discovery through a given reader (capture passes a recording one)."""
    presence = cpu.find_cpus(r)
    nodes = numa.read_nodes(r, presence.usable)
    topo = cpu.read_topology(r, presence, _numa_of_cpus(nodes))
    functions = pci.read_functions(r, presence.usable)
    roots = pci.read_roots(r, functions, presence.usable)
    by_address = {p.address: p for p in functions}
    rdma = net.read_rdma(r, by_address)
    rdma_by_pci: dict[str, list[str]] = {}
    for dev in rdma:
        if dev.pci_address is not None:
            rdma_by_pci.setdefault(dev.pci_address, []).append(dev.name)
    nets = net.read_interfaces(r, by_address, rdma_by_pci)
    return Topology(
        cpus=topo.cpus,
        packages=topo.packages,
        cores=topo.cores,
        caches=topo.caches,
        numa_nodes=nodes,
        pci_devices=functions,
        pcie_roots=roots,
        net_interfaces=nets,
        rdma_devices=rdma,
        warnings=tuple(r.warnings),
    )


def discover(root: str | os.PathLike[str] = "/") -> Topology:
    """Read the machine under `root`. Raises NotASysfsTree only when root is not sysfs at all."""
    try:
        r = SysfsReader(root)
    except OSError as e:
        raise NotASysfsTree(f"{os.fspath(root)!s} is not a sysfs root: {e.strerror}") from None
    check_root(root, r)
    return discover_with(r)
