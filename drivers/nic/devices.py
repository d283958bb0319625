"""NIC devices as published: a pure function of the topology, the uplink set and the selection.

One device per PCI network function (base class 0x02, InfiniBand controllers 0x0c06, and any
function with an RDMA device, which covers RDMA engines outside class 0x02 such as eRDMA),
SR-IOV VFs as devices of their own that name their PF. A function is one device even when it has
no netdev (a VF bound to vfio-pci is still a NIC a pod can take). Names come from the PCI address
(`pci-0000-3b-00-0`), never from interface names, which udev or a pod may change.

Virtual interfaces (veth, macvlan, ...) are published only on request (`--nic-include-virtual`),
named `net-<ifname>`: they have no stabler id. Loopback never is.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from topodra.common import pciattrs
from topodra.common.device import AttributeValue, Device
from topodra.common.topology.model import NetInterface, PciFunction, RdmaDevice, Topology

DRIVER = "nic.topodra.io"
STD = "resource.kubernetes.io"
TOPO = "topology.topodra.io"
KIND = "nic"  # topology.topodra.io/kind of every device (common/pciattrs.py)

# Locality attributes (pciBusID only for addresses the upstream helper accepts, pcieRoot,
# numaNode, pcieSwitch, pcieLeafSwitch, socket) come from common/pciattrs.py, shared with the
# accelerator driver so that matchAttribute lines a NIC up with a GPU. A VMD device (5-hex
# domain) gets no pciBusID; our own `nic.topodra.io/pciAddress` still carries the address.
_BDF = re.compile(r"[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
_NETWORK_BASE = 0x02
_INFINIBAND_CLASS = 0x0C06  # serial bus / InfiniBand (QLogic/Intel TrueScale and OmniPath HFIs)
_IB_SUBCLASS = 0x0207
_IPOIB_MAC_LEN = 59  # 20 bytes
_OPER_DOWN = frozenset({"down", "lowerlayerdown", "notpresent"})


@dataclass(frozen=True, slots=True)
class Selection:
    """What the operator allows to be published."""

    allow_uplink: bool = False
    allow_stacked: bool = False  # ports of bonds/bridges, parents of VLANs (stacking_problem)
    allow_pf_with_vfs: bool = False  # SR-IOV physical functions with VFs enabled (pf_problem)
    list_attributes: bool = False  # numaNode in its list form (DRAListTypeAttributes), not a filter
    include_virtual: bool = False
    include_interfaces: tuple[str, ...] = ()  # globs on interface names; empty: all
    exclude_interfaces: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CharDevice:
    """A character device the pod needs with the NIC (RDMA verbs)."""

    path: str
    major: int | None
    minor: int | None


@dataclass(frozen=True, slots=True)
class Nic:
    """One published NIC: its Device plus what prepare and health need that is not an attribute."""

    device: Device
    pci_address: str | None
    interface: str | None  # netdev name in the host namespace now
    mac: str | None
    virtual: bool
    operstate: str | None = None
    carrier: bool | None = None
    driver: str | None = None
    rdma_device: str | None = None
    char_devices: tuple[CharDevice, ...] = ()
    other_interfaces: tuple[str, ...] = field(default=())  # further netdevs of the same function

    @property
    def name(self) -> str:
        return self.device.name


def device_name_for_pci(address: str) -> str:
    """`0000:3b:00.0` -> `pci-0000-3b-00-0` (also for 5-hex VMD domains)."""
    name: str = pciattrs.device_name(address)
    return name


def device_name_for_interface(ifname: str) -> str:
    """`net-<ifname>` as a DNS label; names that need changing get a hash so two never collide."""
    clean = re.sub(r"[^a-z0-9-]", "-", ifname.lower()).strip("-")
    name = f"net-{clean}" if clean else "net"
    if clean != ifname or len(name) > 63:
        digest = hashlib.sha256(ifname.encode()).hexdigest()[:8]
        name = f"{name[:54].rstrip('-')}-{digest}"
    return name


def is_network_function(topo: Topology, fn: PciFunction) -> bool:
    if fn.class_code is not None and (
        fn.base_class == _NETWORK_BASE or fn.class_code >> 8 == _INFINIBAND_CLASS
    ):
        return True
    return bool(topo.rdma_of_pci(fn.address))


def link_type(fn: PciFunction | None, iface: NetInterface | None) -> str:
    if fn is not None and fn.class_code is not None:
        sub = fn.class_code >> 8
        if sub in (_IB_SUBCLASS, _INFINIBAND_CLASS):
            return "infiniband"
        if sub == 0x0200:
            return "ethernet"
    if iface is not None and iface.mac is not None:
        return "infiniband" if len(iface.mac) == _IPOIB_MAC_LEN else "ethernet"
    return "other"


def _primary(interfaces: Sequence[NetInterface]) -> tuple[NetInterface | None, tuple[str, ...]]:
    """The netdev that stands for a function: the lowest ifindex (an IPoIB child `ib0.8001`
    or a second port is created after its parent), then the name."""
    if not interfaces:
        return None, ()
    ordered = sorted(interfaces, key=lambda i: (i.ifindex if i.ifindex is not None else 1 << 30, i.name))
    return ordered[0], tuple(i.name for i in ordered[1:])


def _matches(name: str | None, globs: Iterable[str]) -> bool:
    return name is not None and any(fnmatch.fnmatchcase(name, g) for g in globs)


def _selected(names: Sequence[str], sel: Selection) -> bool:
    """Interface filters; a function without netdevs passes include filters only when none are set."""
    if any(_matches(n, sel.exclude_interfaces) for n in names):
        return False
    if sel.include_interfaces:
        return any(_matches(n, sel.include_interfaces) for n in names)
    return True


def _char_devices(fn: PciFunction | None, rdma: Sequence[RdmaDevice]) -> tuple[CharDevice, ...]:
    """RDMA verbs nodes, and VFIO nodes of a function bound to vfio-pci (a VM in a pod)."""
    out = []
    for r in rdma:
        for n in r.device_nodes:
            if n.kind == "uverbs":
                out.append(CharDevice(n.dev_path, n.major, n.minor))
    if fn is not None:
        for n in fn.device_nodes:
            if n.kind.startswith("vfio"):
                out.append(CharDevice(n.dev_path, n.major, n.minor))
    return tuple(out)


def _interface_attrs(attrs: dict[str, AttributeValue], iface: NetInterface | None) -> None:
    if iface is None:
        return
    d = DRIVER
    pciattrs.put(attrs, f"{d}/interfaceName", iface.name)
    pciattrs.put(attrs, f"{d}/macAddress", iface.mac)
    pciattrs.put(attrs, f"{d}/mtu", iface.mtu)
    pciattrs.put(attrs, f"{d}/linkSpeedMbps", iface.speed_mbps)
    pciattrs.put(attrs, f"{d}/operState", iface.operstate)
    pciattrs.put(attrs, f"{d}/carrier", iface.carrier)


def pci_nic(
    topo: Topology, fn: PciFunction, interfaces: Sequence[NetInterface], *, lists: bool = False
) -> Nic:
    """The device for one PCI network function (pure)."""
    d = DRIVER
    attrs: dict[str, AttributeValue] = pciattrs.locality_attributes(topo, fn, lists=lists)
    attrs[f"{d}/pciAddress"] = fn.address
    primary, others = _primary(interfaces)
    _interface_attrs(attrs, primary)
    rdma = topo.rdma_of_pci(fn.address)
    attrs[f"{d}/rdma"] = bool(rdma)
    if rdma:
        pciattrs.put(attrs, f"{d}/rdmaDevice", rdma[0].name)
    attrs.update(pciattrs.sriov_attributes(topo, fn, d))
    attrs.update(pciattrs.identity_attributes(fn, d))
    attrs[f"{d}/linkType"] = link_type(fn, primary)
    attrs[f"{d}/virtual"] = False
    attrs[pciattrs.KIND] = KIND
    return Nic(
        device=Device(device_name_for_pci(fn.address), attrs),
        pci_address=fn.address,
        interface=primary.name if primary else None,
        mac=primary.mac if primary else None,
        virtual=False,
        operstate=primary.operstate if primary else None,
        carrier=primary.carrier if primary else None,
        driver=fn.driver,
        rdma_device=rdma[0].name if rdma else None,
        char_devices=_char_devices(fn, rdma),
        other_interfaces=others,
    )


def orphan_nic(address: str, interfaces: Sequence[NetInterface]) -> Nic:
    """An interface whose PCI function is missing from the tree (a capture that kept
    class/net but not the bus entry): published with what the interface says."""
    d = DRIVER
    attrs: dict[str, AttributeValue] = {}
    bus_id = pciattrs.pci_bus_id(address)
    if bus_id is not None:
        attrs[pciattrs.PCI_BUS_ID] = bus_id
    attrs[f"{d}/pciAddress"] = address
    primary, others = _primary(interfaces)
    _interface_attrs(attrs, primary)
    rdma = tuple(primary.rdma_devices) if primary else ()
    attrs[f"{d}/rdma"] = bool(rdma)
    if rdma:
        pciattrs.put(attrs, f"{d}/rdmaDevice", rdma[0])
    attrs[f"{d}/linkType"] = link_type(None, primary)
    attrs[f"{d}/virtual"] = False
    attrs[pciattrs.KIND] = KIND
    return Nic(
        device=Device(device_name_for_pci(address), attrs),
        pci_address=address,
        interface=primary.name if primary else None,
        mac=primary.mac if primary else None,
        virtual=False,
        operstate=primary.operstate if primary else None,
        carrier=primary.carrier if primary else None,
        rdma_device=rdma[0] if rdma else None,
        other_interfaces=others,
    )


def virtual_nic(iface: NetInterface) -> Nic:
    d = DRIVER
    attrs: dict[str, AttributeValue] = {}
    _interface_attrs(attrs, iface)
    attrs[f"{d}/rdma"] = False
    attrs[f"{d}/linkType"] = link_type(None, iface)
    attrs[f"{d}/virtual"] = True
    attrs[pciattrs.KIND] = KIND
    return Nic(
        device=Device(device_name_for_interface(iface.name), attrs),
        pci_address=None,
        interface=iface.name,
        mac=iface.mac,
        virtual=True,
        operstate=iface.operstate,
        carrier=iface.carrier,
    )


def stacking_problem(iface: NetInterface, ports: Mapping[str, Sequence[str]]) -> str | None:
    """Why moving `iface` into a pod would break another interface of the host, or None.

    Moving a netdev to another namespace unregisters it from this one: a bridge port leaves its
    bridge, a macvlan on top stays on the host riding a link the pod then controls, and a bridge
    cannot be moved at all (seen on a 6.18 kernel; bonds and VLANs are treated alike, not tried).
    `ports` maps each master to its ports.
    """
    if iface.master is not None:
        return f"interface {iface.name} is a port of {iface.master}"
    if iface.uppers:
        return f"interface {iface.name} carries {', '.join(sorted(iface.uppers))}"
    if iface.name in ports:
        return f"interface {iface.name} has ports ({', '.join(sorted(ports[iface.name]))})"
    return None


def pf_problem(fn: PciFunction | None, ifaces: Sequence[NetInterface]) -> str | None:
    """Why handing out this SR-IOV physical function would hand out its VFs too, or None.

    Whoever holds a PF with VFs enabled sets their MAC, VLAN, trust, rate and link state
    (`ip link set PF vf N ...`): a pod given the PF could re-tag, redirect or cut off the VFs in
    other pods. The VFs are the devices to hand out; the PF stays with the host.
    """
    sriov = fn.sriov if fn is not None else None
    if fn is None or sriov is None or sriov.physfn is not None or not sriov.num_vfs:
        return None
    what = f"interface {ifaces[0].name}" if ifaces else f"PCI function {fn.address}"
    return f"{what} is the physical function of {sriov.num_vfs} enabled VFs, whose settings its holder sets"


def _candidates(
    topo: Topology, sel: Selection
) -> Iterator[tuple[list[NetInterface], str, Callable[[], Nic], PciFunction | None]]:
    """Every NIC the machine has, before any is left out: its netdevs, its device name, how to
    build it (only the published ones are built) and its PCI function where discovery has one."""
    by_pci: dict[str, list[NetInterface]] = {}
    for iface in topo.net_interfaces:
        if iface.pci_address is not None and not iface.is_virtual:
            by_pci.setdefault(iface.pci_address, []).append(iface)
    for fn in topo.pci_devices:
        if is_network_function(topo, fn):
            ifaces = by_pci.get(fn.address, [])
            make = partial(pci_nic, topo, fn, ifaces, lists=sel.list_attributes)
            yield ifaces, device_name_for_pci(fn.address), make, fn
    known = {p.address for p in topo.pci_devices}
    for address, ifaces in sorted(by_pci.items()):
        if address not in known and _BDF.match(address):
            yield ifaces, device_name_for_pci(address), partial(orphan_nic, address, ifaces), None
    if sel.include_virtual:
        for iface in topo.net_interfaces:
            if iface.is_virtual and iface.name != "lo":
                yield [iface], device_name_for_interface(iface.name), partial(virtual_nic, iface), None


def _withholding(
    ifaces: Sequence[NetInterface],
    fn: PciFunction | None,
    uplinks: frozenset[str],
    sel: Selection,
    ports: Mapping[str, Sequence[str]],
) -> str | None:
    """Why a NIC with these netdevs is not published, or None."""
    names = [i.name for i in ifaces]
    up = [n for n in names if n in uplinks]
    if up and not sel.allow_uplink:
        return f"interface {up[0]} carries the node's own traffic (--nic-allow-uplink publishes it)"
    if not _selected(names, sel):
        return "left out by --nic-include-interfaces / --nic-exclude-interfaces"
    if not sel.allow_stacked:
        for i in ifaces:
            problem = stacking_problem(i, ports)
            if problem is not None:
                return f"{problem} (--nic-allow-stacked publishes it)"
    if not sel.allow_pf_with_vfs:
        problem = pf_problem(fn, ifaces)
        if problem is not None:
            return f"{problem} (--nic-allow-pf-with-vfs publishes it)"
    return None


def _sorted_unique(nics: Iterable[Nic]) -> list[Nic]:
    out = sorted(nics, key=lambda n: n.name)
    seen: set[str] = set()
    unique = []
    for n in out:  # two interfaces whose cleaned names collide: the hash already differs, but be sure
        if n.name not in seen:
            seen.add(n.name)
            unique.append(n)
    return unique


def _ports(topo: Topology) -> dict[str, list[str]]:
    ports: dict[str, list[str]] = {}
    for i in topo.net_interfaces:
        if i.master is not None:
            ports.setdefault(i.master, []).append(i.name)
    return ports


def partition(
    topo: Topology, uplinks: frozenset[str], sel: Selection = Selection()
) -> tuple[list[Nic], dict[str, str]]:
    """(every NIC to publish, sorted by device name for stable slices across rescans; every one
    the machine has that is left out: device name -> why, for a claim's error and the log)."""
    ports = _ports(topo)
    published: list[Nic] = []
    left_out: dict[str, str] = {}
    for ifaces, name, make, fn in _candidates(topo, sel):
        why = _withholding(ifaces, fn, uplinks, sel, ports)
        if why is None:
            published.append(make())
        else:
            left_out.setdefault(name, why)
    return _sorted_unique(published), left_out


def build_nics(topo: Topology, uplinks: frozenset[str], sel: Selection = Selection()) -> list[Nic]:
    """Every NIC to publish (see `partition`)."""
    return partition(topo, uplinks, sel)[0]


def build_devices(topo: Topology, uplinks: frozenset[str], sel: Selection = Selection()) -> list[Device]:
    """The Devices alone, as `topodra slices` prints them."""
    return [n.device for n in build_nics(topo, uplinks, sel)]


def link_is_down(operstate: str | None, carrier: bool | None) -> str | None:
    """Why a link counts as down, or None when it is up or unknown."""
    if operstate in _OPER_DOWN:
        return f"link {operstate}"
    if carrier is False:
        return "no carrier"
    return None
