"""Network interfaces (sys/class/net) and RDMA devices (sys/class/infiniband)."""

from __future__ import annotations

import errno

from topodra.common.topology.model import DeviceNode, NetInterface, PciFunction, RdmaDevice
from topodra.common.topology.names import is_mac, is_numbered
from topodra.common.topology.parse import parse_int
from topodra.common.topology.pci import nearest_function
from topodra.common.topology.reader import SysfsReader, is_link, shown

NET_DIR = "sys/class/net"
IB_DIR = "sys/class/infiniband"
_IB_CHAR_CLASSES = (
    ("sys/class/infiniband_verbs", ("uverbs",), "uverbs", "/dev/infiniband/"),
    ("sys/class/infiniband_mad", ("umad", "issm"), "", "/dev/infiniband/"),
)
# speed/carrier of a down or virtual link answer EINVAL: that is "unknown", not a broken file
_QUIET = (errno.EINVAL, errno.EOPNOTSUPP, errno.ENODEV)


def _where(r: SysfsReader, rel: str, is_link: bool) -> tuple[str, str | None]:
    """(folder holding the attributes, path of the hardware device it belongs to or None)."""
    if is_link:
        path = r.resolve_link(rel)
        if path is None or not r.is_dir(path):
            r.warn(rel, "dangling link" if path else "link points outside the tree")
            return rel, path
        return path, path
    # a plain folder: its `device` link says which device it belongs to
    device = r.resolve_link(f"{rel}/device")
    return rel, device


def _int(r: SysfsReader, rel: str, *, empty_ok: bool = False) -> int | None:
    text = r.read(rel, quiet_errors=_QUIET)
    if text is None or (empty_ok and not text):
        return None
    n: int | None = parse_int(text)
    if n is None:
        r.warn(rel, f"not an integer: {shown(text)}")
    return n


def read_interfaces(
    r: SysfsReader, functions: dict[str, PciFunction], rdma_by_pci: dict[str, list[str]]
) -> tuple[NetInterface, ...]:
    out = []
    for entry in r.scandir(NET_DIR):
        name = entry.name
        rel = f"{NET_DIR}/{name}"
        d, device_path = _where(r, rel, is_link(entry))
        virtual = device_path is None or device_path.startswith("sys/devices/virtual/")
        pci = None if virtual or device_path is None else nearest_function(device_path)
        mac = r.read(f"{d}/address", quiet_errors=_QUIET)
        if mac is not None and not is_mac(mac):
            r.warn(f"{d}/address", f"not a MAC address: {shown(mac)}")
            mac = None
        # captures of down links hold empty speed/carrier files (the kernel answered EINVAL)
        speed = _int(r, f"{d}/speed", empty_ok=True)
        carrier = _int(r, f"{d}/carrier", empty_ok=True)
        fn = functions.get(pci) if pci else None
        master, uppers = _stacking(r, d)
        out.append(
            NetInterface(
                name=name,
                pci_address=pci,
                mac=mac.lower() if mac else None,
                mtu=_int(r, f"{d}/mtu"),
                speed_mbps=speed if speed is not None and speed >= 0 else None,
                operstate=r.read(f"{d}/operstate", quiet_errors=_QUIET),
                carrier=None if carrier is None else carrier == 1,
                rdma_devices=tuple(rdma_by_pci.get(pci, ())) if pci else (),
                sriov_role=fn.sriov.role if fn is not None and fn.sriov is not None else None,
                is_virtual=virtual,
                ifindex=_int(r, f"{d}/ifindex"),
                sysfs_path=d,
                master=master,
                uppers=uppers,
            )
        )
    return tuple(out)


def _stacking(r: SysfsReader, d: str) -> tuple[str | None, tuple[str, ...]]:
    """(master, uppers) from the links in the interface's folder: the kernel adds `master` to a
    port and `upper_<name>` for each interface stacked on it, in the same namespace only."""
    uppers = []
    has_master = False
    for name in r.names(d):
        if name == "master":
            has_master = True
        elif name.startswith("upper_") and len(name) > len("upper_"):
            uppers.append(name[len("upper_") :])
    target = r.readlink(f"{d}/master") if has_master else None
    master = target.rstrip("/").rpartition("/")[2] if target else None
    return master or None, tuple(uppers)


def read_rdma(r: SysfsReader, functions: dict[str, PciFunction]) -> tuple[RdmaDevice, ...]:
    entries = r.scandir(IB_DIR)
    if not entries:
        return ()
    # character devices (uverbsN, umadN, issmN) name their RDMA device in `ibdev`
    chars: dict[str, list[DeviceNode]] = {}
    for cls, prefixes, kind, dev_dir in _IB_CHAR_CLASSES:
        for e in r.scandir(cls):
            if not is_numbered(e.name, *prefixes):
                continue
            ibdev = r.read(f"{cls}/{e.name}/ibdev")
            if ibdev is None:
                continue
            text = r.read(f"{cls}/{e.name}/dev")
            major = minor = None
            if text is not None:
                a, _, b = text.partition(":")
                major, minor = parse_int(a), parse_int(b)
                if major is None or minor is None:
                    r.warn(f"{cls}/{e.name}/dev", f"not major:minor: {shown(text)}")
                    major = minor = None
            node_kind = kind or e.name.rstrip("0123456789")
            chars.setdefault(ibdev, []).append(
                DeviceNode(node_kind, e.name, dev_dir + e.name, major, minor, None)
            )
    out = []
    for e in entries:
        rel = f"{IB_DIR}/{e.name}"
        d, device_path = _where(r, rel, is_link(e))
        pci = nearest_function(device_path) if device_path else None
        fn = functions.get(pci) if pci else None
        # netdevs of the same function (RoCE / IPoIB), read where the function really lives
        nets = tuple(sorted(x.name for x in r.scandir(f"{fn.sysfs_path}/net"))) if fn else ()
        guid = r.read(f"{d}/node_guid")
        nodes = tuple(
            DeviceNode(n.kind, n.name, n.dev_path, n.major, n.minor, pci) for n in chars.get(e.name, [])
        )
        out.append(RdmaDevice(e.name, pci, nets, nodes, guid))
    return tuple(out)
