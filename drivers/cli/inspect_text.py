"""Human view of a Topology: packages → NUMA nodes → cores and caches, the PCI tree with class
names, the blocks of devices that sit together (and the attribute that aligns each), and a
locality matrix with CPU and NUMA affinity in the manner of `nvidia-smi topo -m`.

`text` keeps a large machine readable: VFs are folded into their PF's line and the matrix is
left out past MATRIX_MAX devices (the blocks say the same, grouped). `wide` prints everything.
"""

from __future__ import annotations

from topodra.common.topology.locality import LEVELS, Locality, locality
from topodra.common.topology.model import Cache, PciFunction, Topology
from topodra.common.topology.parse import compress
from topodra.drivers.cli.inspect_view import Block, Item, View, speed
from topodra.drivers.cli.term import Paint

MATRIX_MAX = 24  # devices; past this a text matrix is wider than a wide terminal
LEVEL_STYLE = {
    Locality.SELF: "dim",
    Locality.LEAF: "bold-cyan",
    Locality.SW: "bold-green",
    Locality.ROOT: "green",
    Locality.NUMA: "yellow",
    Locality.SOCK: "magenta",
    Locality.SYS: "red",
}
KIND_STYLE = {"accelerators": "cyan", "nics": "blue", "storage": None, "other": None}


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


def _ids(p: PciFunction) -> str:
    return f"[{(p.vendor_hex or '?')[2:]}:{(p.device_hex or '?')[2:]}]"


def _describe(t: Topology, p: PciFunction, item: Item | None, paint: Paint, wide: bool) -> str:
    """One function's line in the tree: address, class, name, driver, label, nets, extras."""
    from topodra.common.topology.pciclass import class_name

    parts = [p.address, class_name(p.class_code)]
    product = item.product if item is not None and item.fn is p else None
    parts.append(product or _ids(p))
    if p.driver:
        parts.append(p.driver)
    if item is not None and item.fn is p:
        parts.append(paint(item.label, KIND_STYLE.get(item.kind)))
    nets = [i.name for i in t.nets_of_pci(p.address)]
    if nets:
        parts.append("net " + ",".join(nets))
    rdma = [r.name for r in t.rdma_of_pci(p.address)]
    if rdma:
        parts.append("rdma " + ",".join(rdma))
    speeds = [i.speed_mbps for i in t.nets_of_pci(p.address) if i.speed_mbps]
    if speeds:
        parts.append(speed(max(speeds)))
    nodes = [n.name for n in p.device_nodes]
    if nodes:
        parts.append("dev " + ",".join(nodes))
    if wide and p.link is not None and p.link.current_width:
        parts.append(f"x{p.link.current_width} {p.link.current_speed or '?'}")
    if p.sriov is not None and p.sriov.role == "pf":
        parts.append(f"SR-IOV PF ({p.sriov.num_vfs or 0} of {p.sriov.total_vfs or '?'} VFs)")
    if p.sriov is not None and p.sriov.role == "vf":
        parts.append(f"VF of {p.sriov.physfn}")
    return "  ".join(parts)


def _vf_summary(t: Topology, item: Item) -> str:
    vfs = item.vfs
    nets = [i.name for vf in vfs for i in t.nets_of_pci(vf.address)]
    rdma = [r.name for vf in vfs for r in t.rdma_of_pci(vf.address)]
    text = f"+ {len(vfs)} VFs {vfs[0].address}..{vfs[-1].address}"
    if nets:
        text += f"  net {nets[0]}..{nets[-1]}" if len(nets) > 1 else f"  net {nets[0]}"
    if rdma:
        text += f"  rdma {rdma[0]}..{rdma[-1]}" if len(rdma) > 1 else f"  rdma {rdma[0]}"
    return text + "  (-o wide lists each)"


def _pci_section(view: View, paint: Paint, wide: bool) -> list[str]:
    t = view.topology
    if not t.pci_devices:
        return ["PCI: none"]
    everything = wide and view.kinds >= {"accelerators", "nics", "storage", "other"}
    shown: set[str] = set()
    for item in view.items:
        for fn in (item.fn, *(item.vfs if wide else ())):
            shown.add(fn.address)
            shown.update(fn.bridges or ())
    if everything:
        shown = {p.address for p in t.pci_devices}
    if not shown:
        return []
    folded = {vf.address for item in view.items for vf in item.vfs} if not wide else set()
    lines = [paint("PCI devices by root complex:", "bold")]
    by_root: dict[str, list[PciFunction]] = {}
    for p in t.pci_devices:
        if p.address in shown and p.address not in folded:
            by_root.setdefault(p.pcie_root or p.root_bus or "(unknown root)", []).append(p)
    switches = {p.pcie_switch for p in t.pci_devices if p.pcie_switch}
    leaves = {p.nested_leaf_switch for p in t.pci_devices if p.nested_leaf_switch and not p.is_bridge}
    for root, members in by_root.items():
        info = t.pcie_root(root)
        extra = ""
        if info is not None:
            numa = "?" if info.numa_node is None else str(info.numa_node)
            extra = f"  NUMA {numa}, CPUs {compress(info.cpus) or '?'}"
        lines.append(f"  {paint(root, 'bold')}{extra}")
        for p in sorted(members, key=lambda p: (*(p.bridges or ()), p.address)):
            indent = "    " + "  " * len(p.bridges or ())
            owner = view.by_address.get(p.address)
            kind = "switch" if p.address in switches else "leaf switch" if p.address in leaves else None
            sw = f"  [{kind} {p.address}]" if kind else ""
            lines.append(indent + _describe(t, p, owner, paint, wide) + sw)
            if owner is not None and owner.fn is p and owner.vfs and not wide:
                lines.append(indent + "  " + _vf_summary(t, owner))
    return lines


def _item_line(view: View, item: Item, paint: Paint) -> str:
    parts = [paint(item.label.ljust(6), KIND_STYLE.get(item.kind)), item.fn.address, item.class_name]
    if item.product:
        parts.append(item.product)
    if item.nets:
        parts.append(",".join(item.nets))
    if item.rdma:
        parts.append(",".join(item.rdma))
    if item.speed_mbps:
        parts.append(speed(item.speed_mbps))
    if item.vfs:
        parts.append(f"+ {len(item.vfs)} VFs")
    return "  ".join(parts)


def _block_head(view: View, b: Block, depth: int, paint: Paint) -> str:
    t = view.topology
    if depth == 0:
        if b.socket is None:
            return "Socket unknown (the kernel gives no NUMA node or local CPUs)"
        pkg = t.package(b.socket)
        cpus = compress(pkg.cpus) if pkg is not None else "?"
        return f"Socket {b.socket}  CPUs {cpus}  " + paint(
            f"topology.topodra.io/socket={b.socket}", "magenta"
        )
    if depth == 1:
        if b.numa is None:
            return "NUMA node unknown (no numaNode attribute)"
        cpus = compress(t.cpus_of_numa(b.numa)) or "none"
        attr = paint(f"resource.kubernetes.io/numaNode={b.numa}", "yellow")
        return f"NUMA node {b.numa}  CPUs {cpus}  {attr}"
    if depth == 2:
        if b.root is None:
            return "root complex unknown (no pcieRoot attribute)"
        return f"root complex {b.root}  " + paint(f"resource.kubernetes.io/pcieRoot={b.root}", "green")
    if depth == 4:
        return f"leaf switch {b.leaf}  " + paint(f"topology.topodra.io/pcieLeafSwitch={b.leaf}", "bold-cyan")
    if b.switch is None:
        return "not behind a PCIe switch (on a root port)"
    return f"PCIe switch {b.switch}  " + paint(f"topology.topodra.io/pcieSwitch={b.switch}", "bold-green")


def _groups_section(view: View, paint: Paint) -> list[str]:
    blocks = view.blocks()
    if not blocks:
        return []
    lines = [
        paint("What sits together", "bold")
        + " (a claim's matchAttribute on the attribute of a block keeps its devices together):"
    ]
    previous: tuple[object, ...] = ()
    for b in blocks:
        key = (b.socket, b.numa, b.root, b.switch, b.leaf)
        levels = 5 if b.leaf is not None else 4  # a leaf switch only where switches are nested
        for depth in range(levels):
            if previous[: depth + 1] != key[: depth + 1]:
                lines.append("  " + "  " * depth + _block_head(view, b, depth, paint))
        previous = key
        for item in b.items:
            lines.append("  " + "  " * levels + _item_line(view, item, paint))
    return lines


def _legend(paint: Paint) -> list[str]:
    lines = [
        paint("Legend", "bold") + " (codes, from closest; each names the claim attribute two devices share):"
    ]
    for level, info in LEVELS.items():
        attr = info.attribute or "(no attribute in common)" if level is not Locality.SELF else ""
        code = paint(info.code.ljust(5), LEVEL_STYLE[level])
        lines.append(f"  {code} {info.meaning}")
        if level is not Locality.SELF:
            lines.append(f"        matchAttribute: {attr};  nvidia-smi topo -m: {info.nvidia}")
    return lines


def _matrix(view: View, paint: Paint, wide: bool) -> list[str]:
    t = view.topology
    items = view.matrix_items()
    if len(items) < 2:
        return []
    if len(items) > MATRIX_MAX and not wide:
        return [
            f"Locality matrix: left out, {len(items)} devices would make {len(items)}-column lines; the "
            "blocks above say the same. -o wide prints it, --only narrows it."
        ]
    labels = [i.label for i in items]
    width = max(5, *(len(x) for x in labels)) + 1
    head = " " * width + "".join(x.ljust(width) for x in labels) + "CPU Affinity".ljust(20) + "NUMA Affinity"
    lines = [paint("Locality", "bold"), paint(head.rstrip(), "bold")]
    for a in items:
        cells = []
        for b in items:
            level = locality(t, a.fn, b.fn)
            cells.append(paint(level.label.ljust(width), LEVEL_STYLE[level]))
        cpus = compress(a.cpus) or "N/A"
        numa = "N/A" if a.fn.numa_node is None else str(a.fn.numa_node)
        row = paint(a.label.ljust(width), KIND_STYLE.get(a.kind)) + "".join(cells) + cpus.ljust(20) + numa
        lines.append(row.rstrip())
    lines.append("")
    lines.append(paint("Devices", "bold") + ":")
    lines += ["  " + _item_line(view, item, paint) for item in items]
    return lines


def render(view: View, paint: Paint | None = None, wide: bool = False) -> str:
    paint = paint or Paint(False)
    t = view.topology
    out: list[str] = []
    if "cpus" in view.kinds:
        out += _cpu_section(t)
    sections = [_pci_section(view, paint, wide), _groups_section(view, paint), _matrix(view, paint, wide)]
    for section in sections:
        if section:
            if out:
                out.append("")
            out += section
    if view.items:
        out += ["", *_legend(paint)]
    if t.warnings:
        out.append("")
        out.append(f"Warnings ({len(t.warnings)}):")
        out += [f"  {w}" for w in t.warnings]
    return "\n".join(out) + "\n"
