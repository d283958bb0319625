"""PCI functions from sys/bus/pci/devices, located by the sysfs path their entry resolves to.

The path, not config space, tells where a function sits: the root complex folder
(`pciDDDD:BB`), then one folder per PCI-to-PCI bridge, then the function. `pcie_root` follows the
upstream rule for resource.kubernetes.io/pcieRoot (first component under devices/, which must be
a `pci...` folder); `root_bus` is the innermost `pciDDDD:BB` folder, which differs behind Intel
VMD (a second domain nested under an endpoint) and on hosts under platform/ or ACPI folders.
Upstream refuses to publish pcieRoot for 5-hex-digit (VMD) domains; the model keeps the value and
leaves that policy to the publisher.
"""

from __future__ import annotations

import os

from topodra.common.topology import classify
from topodra.common.topology.model import DeviceNode, PcieLink, PcieRoot, PciFunction, Sriov
from topodra.common.topology.names import is_numbered, is_pci_address, is_root_bus
from topodra.common.topology.parse import parse_int, read_cpus, read_hex, read_id, read_int
from topodra.common.topology.reader import SysfsReader, is_dir, is_link, shown

BUS_DIR = "sys/bus/pci/devices"
# Folders under sys/devices that never hold PCI hosts: skip them when hunting for a device.
_NOT_PCI_HOSTS = frozenset({"system", "virtual", "software", "tracepoint", "breakpoint", "kprobe", "uprobe"})
_WALK_DEPTH = 16


class Location:
    """Where a function sits; a plain class, as it never leaves discovery (see cpu.CpuPresence)."""

    __slots__ = ("bridges", "path", "pcie_root", "root_bus")

    def __init__(
        self, path: str, pcie_root: str | None, root_bus: str | None, bridges: tuple[str, ...] | None
    ) -> None:
        self.path = path  # resolved, root-relative: "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
        self.pcie_root = pcie_root
        self.root_bus = root_bus
        self.bridges = bridges  # None: unknown

    @property
    def pcie_switch(self) -> str | None:
        """A switch's upstream port: the second bridge, when a third (its downstream port) follows."""
        return self.bridges[1] if self.bridges is not None and len(self.bridges) >= 3 else None


def locate(path: str) -> Location:
    """Root complex and bridge chain of a function from its resolved sysfs path.

    A path with no `pciDDDD:BB` folder says nothing about the chain (a bus entry that is a plain
    folder with no counterpart under devices/): bridges None, not an empty chain, which would
    claim the function sits directly on a root complex.
    """
    parts = path.split("/")
    pcie_root = None
    if len(parts) > 3 and parts[0] == "sys" and parts[1] == "devices" and is_root_bus(parts[2]):
        pcie_root = parts[2].lower()
    root_at = -1
    for i in range(len(parts) - 1):
        if is_root_bus(parts[i]):
            root_at = i
    if root_at < 0:
        return Location(path, pcie_root, None, None)
    bridges = tuple(p.lower() for p in parts[root_at + 1 : -1] if is_pci_address(p))
    return Location(path, pcie_root, parts[root_at].lower(), bridges)


def nearest_function(path: str) -> str | None:
    """The closest PCI function at or above a sysfs path (a USB NIC answers its USB controller)."""
    for part in reversed(path.split("/")):
        if is_pci_address(part):
            return part.lower()
    return None


class _Finder:
    """Finds where a PCI function really lives when its bus entry is a plain folder, not a link."""

    def __init__(self, r: SysfsReader) -> None:
        self._r = r
        self._index: dict[str, str] | None = None

    def find(self, name: str) -> str | None:
        if self._index is None:
            self._index = {}
            for e in self._r.scandir("sys/devices"):
                if e.name not in _NOT_PCI_HOSTS and is_dir(e, follow=False):
                    self._walk(f"sys/devices/{e.name}", is_root_bus(e.name), 0)
        return self._index.get(name.lower())

    def _walk(self, rel: str, in_pci: bool, depth: int) -> None:
        if depth > _WALK_DEPTH:
            return
        for e in self._r.scandir(rel):
            if not is_dir(e, follow=False):
                continue
            is_fn = is_pci_address(e.name)
            is_root = is_root_bus(e.name)
            child = f"{rel}/{e.name}"
            if is_fn:
                self._index.setdefault(e.name.lower(), child)  # type: ignore[union-attr]
            if is_fn or is_root or not in_pci:
                self._walk(child, in_pci or is_fn or is_root, depth + 1)


def _speed(text: str | None) -> str | None:
    if text is None or text.startswith("Unknown"):
        return None
    return text


def _width(r: SysfsReader, rel: str) -> int | None:
    n = read_int(r, rel)
    return n if n is not None and 0 < n <= 32 else None  # 255 / 0: link down or not a PCIe link


def _dev_numbers(r: SysfsReader, rel: str) -> tuple[int | None, int | None]:
    text = r.read(rel)
    if text is None:
        return None, None
    major, sep, minor = text.partition(":")
    a, b = parse_int(major), parse_int(minor)
    if not sep or a is None or b is None:
        r.warn(rel, f"not major:minor: {shown(text)}")
        return None, None
    return a, b


def _aer(r: SysfsReader, rel: str) -> tuple[tuple[str, int], ...] | None:
    text = r.read(rel)
    if text is None:
        return None
    out = []
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        n = parse_int(fields[-1]) if len(fields) == 2 else None
        if n is None:
            r.warn(rel, f"not 'NAME COUNT' lines: {shown(line)}")
            return None
        out.append((fields[0], n))
    return tuple(out)


def _basename_link(r: SysfsReader, rel: str) -> str | None:
    target = r.readlink(rel)
    return os.path.basename(target.rstrip("/")) if target else None


def _device_nodes(r: SysfsReader, d: str, address: str, scan_gpu: bool) -> list[DeviceNode]:
    nodes: list[DeviceNode] = []
    if scan_gpu:
        for e in r.scandir(f"{d}/drm"):
            if is_numbered(e.name, "card", "renderD"):
                major, minor = _dev_numbers(r, f"{d}/drm/{e.name}/dev")
                kind = "drm-render" if e.name.startswith("render") else "drm-card"
                nodes.append(DeviceNode(kind, e.name, f"/dev/dri/{e.name}", major, minor, address))
        for e in r.scandir(f"{d}/accel"):
            if is_numbered(e.name, "accel"):
                major, minor = _dev_numbers(r, f"{d}/accel/{e.name}/dev")
                nodes.append(DeviceNode("accel", e.name, f"/dev/accel/{e.name}", major, minor, address))
    return nodes


def _vfio_nodes(r: SysfsReader, d: str, address: str, group: int | None) -> list[DeviceNode]:
    nodes: list[DeviceNode] = []
    if group is not None:
        major, minor = _dev_numbers(r, f"sys/class/vfio/{group}/dev")
        nodes.append(DeviceNode("vfio-group", str(group), f"/dev/vfio/{group}", major, minor, address))
    for e in r.scandir(f"{d}/vfio-dev"):
        if is_numbered(e.name, "vfio"):
            major, minor = _dev_numbers(r, f"{d}/vfio-dev/{e.name}/dev")
            path = f"/dev/vfio/devices/{e.name}"
            nodes.append(DeviceNode("vfio-device", e.name, path, major, minor, address))
    return nodes


def _read_function(
    r: SysfsReader, address: str, d: str | None, loc: Location, usable: frozenset[int]
) -> PciFunction:
    if d is None:
        return PciFunction(
            address=address,
            class_code=None,
            vendor=None,
            device=None,
            subsystem_vendor=None,
            subsystem_device=None,
            numa_node=None,
            local_cpus=(),
            driver=None,
            iommu_group=None,
            sriov=None,
            link=None,
            pcie_root=loc.pcie_root,
            root_bus=loc.root_bus,
            bridges=loc.bridges,
            pcie_switch=loc.pcie_switch,
            sysfs_path=loc.path,
        )
    class_code = read_hex(r, f"{d}/class", required=True)
    numa = read_id(r, f"{d}/numa_node")  # -1: firmware gave no proximity (VMs, single-node boxes)
    local = read_cpus(r, f"{d}/local_cpus", f"{d}/local_cpulist")
    driver = _basename_link(r, f"{d}/driver")
    group_name = _basename_link(r, f"{d}/iommu_group")
    group = parse_int(group_name) if group_name else None

    total = numvfs = None
    physfn = _basename_link(r, f"{d}/physfn")
    virtfns: list[str] = []
    if physfn is None:
        total_text = r.read(f"{d}/sriov_totalvfs")
        if total_text is not None:
            total = parse_int(total_text)
            if total is None:
                r.warn(f"{d}/sriov_totalvfs", f"not an integer: {shown(total_text)}")
            numvfs = read_int(r, f"{d}/sriov_numvfs")
            for i in range(min(numvfs or 0, 4096)):
                vf = _basename_link(r, f"{d}/virtfn{i}")
                if vf is not None:
                    virtfns.append(vf.lower())
    sriov = None
    if physfn is not None or total is not None:
        sriov = Sriov(total, numvfs, physfn.lower() if physfn else None, tuple(virtfns))

    link: PcieLink | None = PcieLink(
        current_speed=_speed(r.read(f"{d}/current_link_speed", quiet_errors=(22,))),
        current_width=_width(r, f"{d}/current_link_width"),
        max_speed=_speed(r.read(f"{d}/max_link_speed", quiet_errors=(22,))),
        max_width=_width(r, f"{d}/max_link_width"),
    )
    if link == PcieLink(None, None, None, None):
        link = None

    scan_gpu = class_code is None or classify.in_accelerator_class(class_code)
    nodes = _device_nodes(r, d, address, scan_gpu)
    if driver == "vfio-pci":
        nodes += _vfio_nodes(r, d, address, group)

    return PciFunction(
        address=address,
        class_code=class_code,
        vendor=read_hex(r, f"{d}/vendor", required=True),
        device=read_hex(r, f"{d}/device", required=True),
        subsystem_vendor=read_hex(r, f"{d}/subsystem_vendor"),
        subsystem_device=read_hex(r, f"{d}/subsystem_device"),
        numa_node=numa,
        local_cpus=tuple(sorted(local & usable)) if local is not None else (),
        driver=driver,
        iommu_group=group,
        sriov=sriov,
        link=link,
        pcie_root=loc.pcie_root,
        root_bus=loc.root_bus,
        bridges=loc.bridges,
        pcie_switch=loc.pcie_switch,
        sysfs_path=loc.path,
        aer_fatal=_aer(r, f"{d}/aer_dev_fatal"),
        device_nodes=tuple(nodes),
        revision=read_hex(r, f"{d}/revision"),
    )


def read_functions(r: SysfsReader, usable: frozenset[int]) -> tuple[PciFunction, ...]:
    finder = _Finder(r)
    out: list[PciFunction] = []
    for entry in r.scandir(BUS_DIR):
        name = entry.name
        rel = f"{BUS_DIR}/{name}"
        if not is_pci_address(name):
            r.warn(rel, "not a PCI address")
            continue
        address = name.lower()
        d: str | None
        if is_link(entry):
            path = r.resolve_link(rel)
            if path is None:
                r.warn(rel, "link points outside the tree")
                out.append(_read_function(r, address, None, Location(rel, None, None, None), usable))
                continue
            d = path
            if not r.is_dir(path):
                r.warn(rel, f"dangling link to {path}")
                d = None
        else:
            # A plain folder (some captures copy instead of linking): its files are the device's,
            # its place in the hierarchy is wherever a folder of that name sits under devices/,
            # and unknown when there is none.
            d = rel
            path = finder.find(name) or rel
        out.append(_read_function(r, address, d, locate(path), usable))
    out.sort(key=lambda p: _sort_key(p.address))
    return tuple(out)


def _sort_key(address: str) -> tuple[int, str]:
    domain, _, rest = address.partition(":")
    return (int(domain, 16), rest)


def read_roots(
    r: SysfsReader, functions: tuple[PciFunction, ...], usable: frozenset[int]
) -> tuple[PcieRoot, ...]:
    members: dict[str, list[PciFunction]] = {}
    for p in functions:
        if p.pcie_root is not None:
            members.setdefault(p.pcie_root, []).append(p)
    roots = []
    for name in sorted(members, key=lambda n: _sort_key(n[3:] + ":")):
        bus = name[3:]
        base = f"sys/devices/{name}/pci_bus/{bus}"
        cpus = read_cpus(r, f"{base}/cpuaffinity", f"{base}/cpulistaffinity")
        if cpus is not None:
            cpus = cpus & usable
        if not cpus:
            cpus = frozenset(c for p in members[name] for c in p.local_cpus)
        numas = {p.numa_node for p in members[name] if p.numa_node is not None}
        roots.append(PcieRoot(name, tuple(sorted(cpus)), numas.pop() if len(numas) == 1 else None))
    return tuple(roots)
