"""Human view of a Topology: packages → NUMA nodes → cores and caches, the PCI tree, a locality matrix."""

from __future__ import annotations

from topodra.common.topology.locality import locality
from topodra.common.topology.model import Cache, PciFunction, Topology
from topodra.common.topology.parse import compress


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            v = n / scale
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} B"


def _cache_lines(caches: list[Cache], core_sets: set[tuple[int, ...]], indent: str) -> list[str]:
    out = []
    by_kind: dict[tuple[int, str, int | None], list[Cache]] = {}
    for c in caches:
        by_kind.setdefault((c.level, c.type, c.size_bytes), []).append(c)
    for (level, ctype, size), group in sorted(by_kind.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        head = f"{indent}L{level} {ctype} {_size(size)}"
        if len(group) > 1 and all(c.cpus in core_sets for c in group):
            out.append(f"{head}: one per core (x{len(group)})")
        elif len(group) > 4 and all(len(c.cpus) == 1 for c in group):
            out.append(f"{head}: one per CPU (x{len(group)})")
        else:
            out.append(f"{head}: " + "  ".join(f"[{compress(c.cpus)}]" for c in group))
    return out


def _cores_and_caches(
    t: Topology, cpus: set[int], caches: list[Cache], core_sets: set[tuple[int, ...]], indent: str
) -> list[str]:
    lines = []
    cores = [c for c in t.cores if c.cpus[0] in cpus]
    if cores:
        smt = "/".join(str(x) for x in sorted({len(c.cpus) for c in cores}))
        types = sorted({c.core_type for c in cores if c.core_type})
        kinds = f" ({', '.join(types)})" if types else ""
        lines.append(f"{indent}cores: {len(cores)} x {smt} thread(s){kinds}")
    return lines + _cache_lines(caches, core_sets, indent)


def _cpu_section(t: Topology) -> list[str]:
    usable = t.usable_cpus()
    lines = [
        f"Machine: {len(t.packages)} package(s), {len(t.numa_nodes)} NUMA node(s), "
        f"{len(t.cores)} core(s), {len(usable)} usable CPU(s) of {len(t.cpus)}"
    ]
    offline = [c.id for c in t.cpus if not c.usable]
    if offline:
        lines.append(f"  not usable (offline or no topology): {compress(offline)}")
    core_sets = {c.cpus for c in t.cores}
    shown_nodes: set[int] = set()
    blocks = [(f"Package {p.index} (id {'?' if p.id is None else p.id})", p.cpus) for p in t.packages]
    homeless = [c.id for c in t.cpus if c.usable and c.package is None]
    if homeless:
        blocks.append(("No package (the kernel gave no package mask)", tuple(homeless)))
    for title, pcpus in blocks:
        lines.append(f"{title}: CPUs {compress(pcpus)}")
        pset = set(pcpus)
        in_package = [c for c in t.caches if set(c.cpus) <= pset]
        nodes = []
        for n in t.numa_nodes:
            if set(n.cpus) & pset:
                shown_nodes.add(n.id)
                nodes.append((n, set(n.cpus) & pset))
        if not nodes:
            lines += _cores_and_caches(t, pset, in_package, core_sets, "  ")
            continue
        # caches wider than one node (an L3 shared by SNC nodes) belong to the package
        wide = [c for c in in_package if not any(set(c.cpus) <= cpus for _, cpus in nodes)]
        lines += _cache_lines(wide, core_sets, "  ")
        for n, cpus in nodes:
            dist = " ".join(str(d) for _, d in n.distances)
            span = "" if cpus == set(n.cpus) else f" (of {compress(n.cpus)}: the node spans packages)"
            lines.append(
                f"  NUMA node {n.id}: CPUs {compress(cpus)}{span}, memory {_size(n.memory_bytes)}, "
                f"distances [{dist}]"
            )
            narrow = [c for c in in_package if set(c.cpus) <= cpus]
            lines += _cores_and_caches(t, cpus, narrow, core_sets, "    ")
    for n in t.numa_nodes:
        if n.id not in shown_nodes:
            what = f"CPUs {compress(n.cpus)}" if n.cpus else "no CPUs"
            lines.append(f"NUMA node {n.id}: {what}, memory {_size(n.memory_bytes)}")
    return lines


def _label(t: Topology, p: PciFunction, names: dict[str, str]) -> str:
    parts = [p.address, p.class_hex or "class?", f"{p.vendor_hex or '?'}:{p.device_hex or '?'}"]
    if p.driver:
        parts.append(p.driver)
    mark = names.get(p.address)
    if mark:
        parts.append(f"<{mark}>")
    nets = [i.name for i in t.nets_of_pci(p.address)]
    if nets:
        parts.append("net " + ",".join(nets))
    nodes = [n.name for n in p.device_nodes]
    if nodes:
        parts.append("dev " + ",".join(nodes))
    if p.sriov is not None and p.sriov.role:
        parts.append(f"sriov {p.sriov.role}")
    return "  ".join(parts)


def _marks(t: Topology) -> tuple[dict[str, str], list[PciFunction], list[PciFunction]]:
    accels = list(t.accelerators())
    nics = [p for p in t.pci_devices if p.is_network or t.nets_of_pci(p.address)]
    nics = [p for p in nics if p not in accels]
    names: dict[str, str] = {}
    for i, p in enumerate(accels):
        names[p.address] = f"ACC{i}"
    for i, p in enumerate(nics):
        names[p.address] = f"NIC{i}"
    return names, accels, nics


def _pci_section(t: Topology, names: dict[str, str]) -> list[str]:
    if not t.pci_devices:
        return ["PCI: none"]
    lines = ["PCI devices by root complex:"]
    by_root: dict[str, list[PciFunction]] = {}
    for p in t.pci_devices:
        by_root.setdefault(p.pcie_root or p.root_bus or "(unknown root)", []).append(p)
    switches = {p.pcie_switch for p in t.pci_devices if p.pcie_switch}
    for root, members in by_root.items():
        info = t.pcie_root(root)
        extra = ""
        if info is not None:
            numa = "?" if info.numa_node is None else str(info.numa_node)
            extra = f"  (NUMA {numa}, CPUs {compress(info.cpus) or '?'})"
        lines.append(f"  {root}{extra}")
        for p in sorted(members, key=lambda p: (*(p.bridges or ()), p.address)):
            depth = len(p.bridges or ())
            sw = "  [switch]" if p.address in switches else ""
            lines.append("    " + "  " * depth + _label(t, p, names) + sw)
    return lines


def _matrix(
    t: Topology, names: dict[str, str], accels: list[PciFunction], nics: list[PciFunction]
) -> list[str]:
    items = accels + nics
    if not accels or not nics:
        return []
    labels = [names[p.address] for p in items]
    width = max(5, *(len(x) for x in labels)) + 1
    lines = ["Locality (SW same switch, ROOT same root complex, NUMA, SOCK same socket, SYS across):"]
    lines.append(" " * width + "".join(x.ljust(width) for x in labels))
    for a in items:
        row = "".join(locality(t, a, b).label.ljust(width) for b in items)
        lines.append(names[a.address].ljust(width) + row)
    legend = [f"  {names[p.address]} = {p.address}" for p in items]
    return [*lines, *legend]


def render(t: Topology) -> str:
    names, accels, nics = _marks(t)
    out = _cpu_section(t)
    out.append("")
    out += _pci_section(t, names)
    matrix = _matrix(t, names, accels, nics)
    if matrix:
        out.append("")
        out += matrix
    if t.warnings:
        out.append("")
        out.append(f"Warnings ({len(t.warnings)}):")
        out += [f"  {w}" for w in t.warnings]
    return "\n".join(out) + "\n"
