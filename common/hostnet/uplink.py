"""Which interfaces carry the node's own traffic, so the NIC driver never hands them to a pod.

Moving the uplink into a pod cuts the node off the network (kubelet, the driver itself, every
other pod), so the NIC driver leaves it out unless the operator insists (`--nic-allow-uplink`).
The uplink is found two independent ways, because either alone misses real set-ups:

- the default route (`proc/net/route`, `proc/net/ipv6_route` under the discovery root): covers
  nodes whose InternalIP sits on another interface than the default route, and captured trees;
- the node's InternalIP (the NIC driver's `--nic-node-ip`, defaulting to the NODE_IP
  environment variable that a DaemonSet fills from `status.hostIP`): covers nodes without a
  default route (air-gapped, policy routing in other tables).

Both are then widened to the devices underneath: a bond, bridge or VLAN holding the route has
its ports as `lower_*` links in sysfs, and on Azure accelerated networking the VF is a lower
device of the synthetic uplink. Those ports are the uplink too.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from topodra.common.topology import hostfiles

# rtentry flags (include/uapi/linux/route.h, ipv6_route.h)
_RTF_UP = 0x0001
_RTF_REJECT = 0x0200
_MAX_ROUTE_FILE = 1 << 22  # a full BGP table is ~1M lines; we only need the default entries
_MAX_LOWER_DEPTH = 8


@dataclass(frozen=True, slots=True)
class DefaultRoute:
    interface: str
    family: int  # 4 or 6
    metric: int


def parse_ipv4_routes(text: str) -> list[DefaultRoute]:
    """Default routes from /proc/net/route (hex fields, header line first).

    Lines that do not parse are skipped: a half-written line must not make the uplink vanish.
    """
    out = []
    lines = text.splitlines()
    for line in lines[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        iface, dest, flags_hex, metric_text, mask = fields[0], fields[1], fields[3], fields[6], fields[7]
        try:
            flags = int(flags_hex, 16)
            is_default = int(dest, 16) == 0 and int(mask, 16) == 0
            metric = int(metric_text)
        except ValueError:
            continue
        if is_default and flags & _RTF_UP and not flags & _RTF_REJECT and iface != "lo":
            out.append(DefaultRoute(iface, 4, metric))
    return out


def parse_ipv6_routes(text: str) -> list[DefaultRoute]:
    """Default routes from /proc/net/ipv6_route (no header; ::/0 with a device other than lo).

    The kernel keeps an unreachable ::/0 on `lo` with RTF_REJECT in every table: not a route.
    """
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 10:
            continue
        dest, plen, metric_hex, flags_hex, iface = fields[0], fields[1], fields[5], fields[8], fields[9]
        try:
            is_default = int(dest, 16) == 0 and int(plen, 16) == 0
            flags = int(flags_hex, 16)
            metric = int(metric_hex, 16)
        except ValueError:
            continue
        if is_default and flags & _RTF_UP and not flags & _RTF_REJECT and iface != "lo":
            out.append(DefaultRoute(iface, 6, metric))
    return out


def interfaces_holding(addresses: Mapping[str, Sequence[str]], node_ips: Iterable[str]) -> frozenset[str]:
    """Interfaces that carry one of `node_ips` (addresses given per interface, with or without
    a prefix length). Unparseable entries are ignored on both sides."""
    wanted = set()
    for ip in node_ips:
        try:
            wanted.add(ipaddress.ip_address(ip.strip().split("/")[0].split("%")[0]))
        except ValueError:
            continue
    if not wanted:
        return frozenset()
    out = set()
    for name, addrs in addresses.items():
        for a in addrs:
            try:
                if ipaddress.ip_address(a.split("/")[0].split("%")[0]) in wanted:
                    out.add(name)
            except ValueError:
                continue
    return frozenset(out)


def parse_if_inet6(text: str) -> dict[str, list[str]]:
    """IPv6 addresses per interface from /proc/net/if_inet6 (the only per-interface address list
    procfs has; IPv4 needs netlink, see `live_addresses`)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 6 or len(fields[0]) != 32:
            continue
        try:
            addr = ipaddress.IPv6Address(int(fields[0], 16))
            plen = int(fields[2], 16)
        except ValueError:
            continue
        out.setdefault(fields[5], []).append(f"{addr}/{plen}")
    return out


# --- reading (the edge) -------------------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(_MAX_ROUTE_FILE)
    except OSError:
        return None


def default_route_interfaces(root: str) -> frozenset[str]:
    """Interfaces holding a default route, from the route files under `root` (absent: none)."""
    names: set[str] = set()
    v4 = _read(os.path.join(root, "proc/net/route"))
    if v4 is not None:
        names.update(r.interface for r in parse_ipv4_routes(v4))
    v6 = _read(os.path.join(root, "proc/net/ipv6_route"))
    if v6 is not None:
        names.update(r.interface for r in parse_ipv6_routes(v6))
    return frozenset(names)


def live_addresses(root: str) -> dict[str, list[str]]:
    """Addresses per interface. For the running machine ("/") psutil asks netlink (IPv4 and IPv6);
    for a captured tree only proc/net/if_inet6 can say anything."""
    if hostfiles.is_this_host(root):
        try:
            import psutil

            out: dict[str, list[str]] = {}
            for name, addrs in psutil.net_if_addrs().items():
                for a in addrs:
                    if a.family.name in ("AF_INET", "AF_INET6"):
                        out.setdefault(name, []).append(a.address)
            return out
        except Exception:  # psutil missing or netlink refused: fall back to procfs
            pass
    text = _read(os.path.join(root, "proc/net/if_inet6"))
    return parse_if_inet6(text) if text else {}


def lower_closure(root: str, names: Iterable[str]) -> frozenset[str]:
    """`names` plus every device below them (bond/bridge ports, VLAN parents, Azure VFs),
    following sysfs `lower_<name>` links and `master` links pointing at a member."""
    seen = set(names)
    frontier = list(seen)
    net = os.path.join(root, "sys/class/net")
    for _ in range(_MAX_LOWER_DEPTH):
        found = []
        for name in frontier:
            try:
                entries = os.listdir(os.path.join(net, name))
            except OSError:
                continue
            found += [e[len("lower_") :] for e in entries if e.startswith("lower_")]
        try:
            everyone = os.listdir(net)
        except OSError:
            everyone = []
        for other in everyone:
            if other in seen:
                continue
            try:
                master = os.path.basename(os.readlink(os.path.join(net, other, "master")))
            except OSError:
                continue
            if master in frontier:
                found.append(other)
        frontier = [n for n in found if n not in seen]
        if not frontier:
            break
        seen.update(frontier)
    return frozenset(seen)


def find_uplinks(root: str, node_ips: Sequence[str] = ()) -> frozenset[str]:
    """Every interface that is, or is underneath, the node's uplink."""
    holders = set(default_route_interfaces(root))
    if node_ips:
        holders |= interfaces_holding(live_addresses(root), node_ips)
    return lower_closure(root, holders) if holders else frozenset()
