"""Which part of the machine a published device is: the matching step of `topodra check`.

A device is matched by the standard `resource.kubernetes.io/pciBusID` when it has one that names
a PCI function of the machine. Without it, the driver's own identifiers are tried, and the report
says which one matched: an address under the driver's domain (`dra.net/pciAddress`, Intel's bare
`pciAddress`, dranet's split `pciAddressDomain/Bus/Device/Function`), a network interface name
(`dra.net/ifName`), the device name when it spells an address (`pci-0000-3b-00-0`), a CPU list, or
a NUMA node id (`dra.cpu/numaNodeID`). A device that names an address is never matched by
anything weaker: if its address is not on the machine, it stays unmatched and says so.

Everything here is a pure function of the topology and the device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from topodra.common.check.attrs import NUMA_NODE, PCI_BUS_ID, SOCKET, domain_of, own_meaning
from topodra.common.check.devices import SliceDevice
from topodra.common.topology.model import Topology
from topodra.common.topology.parse import parse_int

# what a driver may write for an address: any case, domain optional (then 0000), 4-8 hex domain
_LOOSE_BDF = re.compile(r"(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")
# an address spelled in a device name: pci-0000-3b-00-0, 0000-3b-00-0-0x56c0
_NAME_BDF = re.compile(r"(?:^|-)([0-9a-f]{4,8})-([0-9a-f]{2})-([0-9a-f]{2})-([0-7])(?=-|$)")
_SPLIT = ("pciAddressDomain", "pciAddressBus", "pciAddressDevice", "pciAddressFunction")
MAX_CPUS = 65_536


@dataclass(frozen=True, slots=True)
class Identity:
    """How a device was matched. `kind`: "pci", "interface" (a virtual one: no PCI locality),
    "cpus", "numa", "socket" or "none"; `by` names the attribute (or "device name") used."""

    kind: str
    by: str
    pci: str | None = None
    interface: str | None = None
    cpus: tuple[int, ...] = ()
    numa: int | None = None
    socket: int | None = None
    note: str = ""

    @property
    def matched(self) -> bool:
        return self.kind != "none"

    @property
    def by_standard(self) -> bool:
        return self.by == PCI_BUS_ID


def normalize_address(text: str) -> str | None:
    """A loosely written PCI address in the kernel's form (lowercase, domain added), or None."""
    m = _LOOSE_BDF.fullmatch(text.strip())
    if m is None:
        return None
    domain = (m.group(1) or "0000").lower()
    return f"{domain}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


def address_claims(dev: SliceDevice) -> list[tuple[str, str]]:
    """(attribute, address as the kernel writes it) for every attribute that names a PCI
    address, the standard one first."""
    out: list[tuple[str, str]] = []
    std = dev.attributes.get(PCI_BUS_ID)
    if std is not None and std.base == "string":
        for item in std.items:
            if (addr := normalize_address(item)) is not None:
                out.append((PCI_BUS_ID, addr))
    for name, value in sorted(dev.attributes.items()):
        if own_meaning(name) == "address" and value.kind == "string":
            addr = normalize_address(value.value)
            if addr is not None:
                out.append((name, addr))
    split = _split_address(dev)
    if split is not None:
        out.append(split)
    return out


def _split_address(dev: SliceDevice) -> tuple[str, str] | None:
    """dranet once published the address as four attributes; take them when all are there."""
    for domain in sorted({domain_of(n) for n in dev.attributes}):
        parts = [dev.attributes.get(f"{domain}/{p}") for p in _SPLIT]
        if all(p is not None and p.kind == "string" for p in parts):
            d, b, s, f = (str(p.value) for p in parts if p is not None)
            addr = normalize_address(f"{d}:{b}:{s}.{f}")
            if addr is not None:
                return f"{domain}/pciAddress*", addr
    return None


def identify(topo: Topology, dev: SliceDevice) -> Identity:
    claims = address_claims(dev)
    for name, addr in claims:
        if topo.pci(addr) is not None:
            return Identity("pci", name, pci=addr)
    interfaces = [
        (n, v.value)
        for n, v in sorted(dev.attributes.items())
        if own_meaning(n) == "interface" and v.kind == "string"
    ]
    for name, ifname in interfaces:
        net = topo.net(ifname)
        if net is None:
            continue
        if net.pci_address is not None and topo.pci(net.pci_address) is not None:
            return Identity("pci", name, pci=net.pci_address, interface=ifname)
        if net.is_virtual:
            return Identity(
                "interface", name, interface=ifname, note=f"virtual interface {ifname}: no PCI locality"
            )
    if claims:
        return Identity("none", claims[0][0], note=_unknown_address(topo, claims))
    if interfaces:
        return Identity(
            "none", interfaces[0][0], note=f"interface {interfaces[0][1]!r} is not on this machine"
        )
    m = _NAME_BDF.search(dev.name)
    if m is not None:
        addr = f"{m.group(1)}:{m.group(2)}:{m.group(3)}.{m.group(4)}"
        if topo.pci(addr) is not None:
            return Identity("pci", "device name", pci=addr)
    for name, value in sorted(dev.attributes.items()):
        if own_meaning(name) == "cpus":
            cpus = _cpu_list(value.value) if value.kind in ("string", "ints") else None
            if cpus is None:
                continue
            missing = sorted(set(cpus) - set(topo.usable_cpus()))
            if missing:
                return Identity("none", name, note=f"names CPUs this machine does not have: {missing[:8]}")
            return Identity("cpus", name, cpus=cpus)
    for name, value in sorted(dev.attributes.items()):
        numa = value.value if own_meaning(name) == "numa" and value.kind == "int" else -1
        if numa >= 0 and topo.numa_node(numa) is not None:
            return Identity("numa", name, numa=numa, cpus=topo.cpus_of_numa(numa))
    std = dev.attributes.get(NUMA_NODE)
    if std is not None and std.base == "int" and std.items and isinstance(std.items[0], int):
        node = std.items[0]
        if node >= 0 and topo.numa_node(node) is not None:
            note = "matched only by its own numaNode: that value can be checked for existence only"
            return Identity("numa", NUMA_NODE, numa=node, cpus=topo.cpus_of_numa(node), note=note)
    sock = dev.attributes.get(SOCKET)
    if sock is not None and sock.kind == "int":
        pkg = topo.package(sock.value)
        if pkg is not None:
            return Identity("socket", SOCKET, socket=pkg.index, cpus=pkg.cpus)
    return Identity(
        "none",
        "",
        note="no identifier this check understands (pciBusID, an address, an interface, CPUs, a NUMA node)",
    )


def _unknown_address(topo: Topology, claims: list[tuple[str, str]]) -> str:
    name, addr = claims[0]
    if any(i.pci_address == addr for i in topo.net_interfaces):
        return f"{name} {addr}: an interface of this machine sits on it, but the tree lacks its PCI entry"
    return f"{name} {addr} is not a PCI function of this machine"


def _cpu_list(value: object) -> tuple[int, ...] | None:
    """A kernel-style CPU list ("0-3,8") or an int list, bounded; None when it is neither."""
    if isinstance(value, tuple):
        ok = all(isinstance(v, int) and 0 <= v < MAX_CPUS for v in value)
        return tuple(sorted(set(value))) if ok and value else None
    if not isinstance(value, str) or not value.strip():
        return None
    out: set[int] = set()
    for part in value.split(","):
        lo, sep, hi = part.strip().partition("-")
        a = parse_int(lo) if lo else None
        b = (parse_int(hi) if hi else None) if sep else a
        if a is None or b is None or not 0 <= a <= b < MAX_CPUS or len(out) + b - a >= MAX_CPUS:
            return None
        out.update(range(a, b + 1))
    return tuple(sorted(out))


def identifier_note(identity: Identity) -> str:
    """How the report names the match: "pciBusID", "dra.net/pciAddress (no pciBusID)", "unmatched"."""
    if identity.kind == "none":
        return "unmatched"
    if identity.by_standard:
        return "pciBusID"
    return f"{identity.by} (no pciBusID)" if identity.kind == "pci" else identity.by
