"""What `topodra inspect` shows, before it is drawn: the devices of the selected kinds, their
short labels (ACC0, NIC0, ...), and the blocks of devices that sit together.

Pure: built from a Topology once, then the text, wide and SVG views only lay it out, so all
three name the same device the same way. SR-IOV VFs ride along with their PF (same switch,
root and NUMA node), which is what keeps a machine with 300 VFs readable.
"""

from __future__ import annotations

from topodra.common.records import field, record
from topodra.common.topology.model import PciFunction, Topology
from topodra.common.topology.pciclass import class_name

KINDS = ("cpus", "accelerators", "nics", "storage", "other")
PREFIX = {"accelerators": "ACC", "nics": "NIC", "storage": "STO", "other": "DEV"}
_STORAGE_BASE = 0x01
# host bridges, PCI bridges and system peripherals (IOMMUs, the root complexes' own functions):
# the tree itself, not devices anybody claims
_STRUCTURE_CLASSES = (0x0600, 0x0604, 0x0609)
_SYSTEM_PERIPHERAL_BASE = 0x08


def parse_only(text: str) -> frozenset[str]:
    """`--only accelerators,nics`: the kinds to show (singular forms accepted too)."""
    wanted = set()
    for raw in text.split(","):
        word = raw.strip().lower()
        if not word:
            continue
        plural = word if word.endswith("s") or word == "other" else word + "s"
        if plural == "storages":
            plural = "storage"
        if plural not in KINDS:
            raise ValueError(f"{raw.strip()!r} is not one of {', '.join(KINDS)}")
        wanted.add(plural)
    if not wanted:
        raise ValueError(f"name at least one of {', '.join(KINDS)}")
    return frozenset(wanted)


@record
class Item:
    """One device shown by inspect (a PF stands for its VFs too)."""

    fn: PciFunction
    kind: str  # accelerators | nics | storage | other
    label: str  # ACC0, NIC3, ...
    class_name: str
    product: str | None  # vendor and device name from pci.ids, when it is there
    nets: tuple[str, ...]
    rdma: tuple[str, ...]
    speed_mbps: int | None
    vfs: tuple[PciFunction, ...] = ()

    @property
    def cpus(self) -> tuple[int, ...]:
        return self.fn.local_cpus


@record
class Block:
    """Devices that share every locality attribute down to `switch` (None: not known / none),
    and `leaf`, the leaf switch, where switches are nested (None: on the outermost switch)."""

    socket: int | None
    numa: int | None
    root: str | None
    switch: str | None
    leaf: str | None
    items: tuple[Item, ...]


@record(frozen=False)
class View:
    topology: Topology
    kinds: frozenset[str]
    items: list[Item] = field(default_factory=list)
    by_address: dict[str, Item] = field(default_factory=dict)  # VFs map to their PF's item

    def matrix_items(self) -> list[Item]:
        """The matrix compares accelerators and NICs; storage and other only when asked for."""
        kinds = {"accelerators", "nics"} if self.kinds >= set(PREFIX) else self.kinds
        order = list(PREFIX)
        return sorted((i for i in self.items if i.kind in kinds), key=lambda i: order.index(i.kind))

    def blocks(self) -> list[Block]:
        Key = tuple[int | None, int | None, str | None, str | None, str | None]
        keyed: dict[Key, list[Item]] = {}
        for item in self.items:
            fn = item.fn
            pkg = self.topology.package_of_pci(fn.address)
            leaf = fn.nested_leaf_switch
            key = (None if pkg is None else pkg.index, fn.numa_node, fn.pcie_root, fn.pcie_switch, leaf)
            keyed.setdefault(key, []).append(item)

        def order(k: Key) -> tuple[object, ...]:
            # unknowns last; but a switch's own devices before its leaves, so that the text view
            # does not print them after the last leaf's, where they would read as that leaf's
            *outer, leaf = k
            return (*((v is None, v if v is not None else 0) for v in outer), (leaf is not None, leaf or ""))

        return [Block(*k, items=tuple(keyed[k])) for k in sorted(keyed, key=order)]


def kind_of(t: Topology, fn: PciFunction, accelerators: set[str]) -> str | None:
    """Which kind a function is shown as; None for the bridges that make up the tree."""
    if fn.address in accelerators:
        return "accelerators"
    if fn.is_network or t.nets_of_pci(fn.address):
        return "nics"
    if fn.class_code is not None and fn.class_code >> 8 in _STRUCTURE_CLASSES:
        return None
    if fn.base_class == _SYSTEM_PERIPHERAL_BASE:
        return None
    if fn.base_class == _STORAGE_BASE:
        return "storage"
    return "other"


def build(t: Topology, kinds: frozenset[str] = frozenset(KINDS), pci_ids: tuple[str, ...] = ()) -> View:
    view = View(t, kinds)
    accelerators = {p.address for p in t.accelerators()}
    counters = dict.fromkeys(PREFIX, 0)
    vfs_of: dict[str, list[PciFunction]] = {}
    for fn in t.pci_devices:
        physfn = fn.sriov.physfn if fn.sriov is not None else None
        if physfn is not None and t.pci(physfn) is not None:
            vfs_of.setdefault(physfn, []).append(fn)
    for fn in t.pci_devices:
        kind = kind_of(t, fn, accelerators)
        if kind is None or kind not in kinds:
            continue
        physfn = fn.sriov.physfn if fn.sriov is not None else None
        if physfn is not None and t.pci(physfn) is not None:
            continue  # shown with its PF
        nets = tuple(i.name for i in t.nets_of_pci(fn.address))
        speeds = [i.speed_mbps for i in t.nets_of_pci(fn.address) if i.speed_mbps]
        item = Item(
            fn=fn,
            kind=kind,
            label=f"{PREFIX[kind]}{counters[kind]}",
            class_name=class_name(fn.class_code),
            product=fn.product_name(pci_ids or None),
            nets=nets,
            rdma=tuple(r.name for r in t.rdma_of_pci(fn.address)),
            speed_mbps=max(speeds) if speeds else None,
            vfs=tuple(vfs_of.get(fn.address, ())),
        )
        counters[kind] += 1
        view.items.append(item)
        view.by_address[fn.address] = item
        for vf in item.vfs:
            view.by_address[vf.address] = item
    return view


def speed(mbps: int | None) -> str:
    if not mbps:
        return ""
    return f"{mbps // 1000} Gb/s" if mbps % 1000 == 0 else f"{mbps} Mb/s"
