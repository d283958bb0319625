"""Network interfaces, RDMA devices, routes and the machine's identity (DMI, hostname)."""

from __future__ import annotations

import ipaddress

from topodra.common.synth.plan import ARPHRD_INFINIBAND, UVERBS_MAJOR, UVERBS_MINOR_BASE, Netdev, Plan
from topodra.common.synth.tree import Tree

IB_BROADCAST = "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff"
DEV_HEADER = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast"
    "|bytes    packets errs drop fifo colls carrier compressed\n"
)
ROUTE_HEADER = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"


def render_net(plan: Plan, tree: Tree) -> None:
    for n in plan.netdevs:
        _netdev(plan, tree, n)
    for r in plan.rdma:
        f = plan.function(r.function)
        d = f"{f.dir}/infiniband/{r.name}"
        tree.file(f"{d}/node_guid", r.node_guid)
        tree.file(f"{d}/sys_image_guid", r.node_guid)
        tree.file(f"{d}/node_type", "1: CA")
        tree.file(f"{d}/node_desc", f"{plan.spec.hostname} {r.name}")
        tree.file(f"{d}/fw_ver", r.fw_ver)
        tree.file(f"{d}/hca_type", r.hca_type)
        tree.file(f"{d}/board_id", r.board_id)
        port = f"{d}/ports/1"
        tree.file(f"{port}/state", "4: ACTIVE" if r.active else "1: DOWN")
        tree.file(f"{port}/phys_state", "5: LinkUp" if r.active else "3: Disabled")
        tree.file(f"{port}/link_layer", r.link_layer)
        tree.file(f"{port}/rate", r.rate)
        ib = r.link_layer == "InfiniBand"
        tree.file(f"{port}/lid", f"0x{(r.uverbs + 1):x}" if ib else "0x0")
        tree.file(f"{port}/sm_lid", "0x1" if ib else "0x0")
        tree.file(f"{port}/lid_mask_count", "0")
        tree.file(f"{port}/cap_mask", "0x2659e848" if ib else "0x00010000")
        tree.file(f"{port}/gids/0", _gid(r.node_guid))
        if r.netdev is not None:
            tree.file(f"{port}/gid_attrs/ndevs/0", r.netdev)
            tree.file(f"{port}/gid_attrs/types/0", "IB/RoCE v1")
        tree.link(f"{d}/device", f.dir)
        tree.link(f"{d}/subsystem", "sys/class/infiniband")
        tree.link(f"sys/class/infiniband/{r.name}", d)
        v = f"{f.dir}/infiniband_verbs/uverbs{r.uverbs}"
        minor = UVERBS_MINOR_BASE + r.uverbs
        tree.file(f"{v}/dev", f"{UVERBS_MAJOR}:{minor}")
        tree.file(f"{v}/ibdev", r.name)
        tree.file(f"{v}/abi_version", "1")
        tree.file(f"{v}/uevent", f"MAJOR={UVERBS_MAJOR}\nMINOR={minor}\nDEVNAME=infiniband/uverbs{r.uverbs}")
        tree.link(f"{v}/device", f.dir)
        tree.link(f"{v}/subsystem", "sys/class/infiniband_verbs")
        tree.link(f"sys/class/infiniband_verbs/uverbs{r.uverbs}", v)
    if plan.rdma:
        tree.file("sys/class/infiniband_verbs/abi_version", "6")
    _routes(plan, tree)
    _identity(plan, tree)


def _gid(node_guid: str) -> str:
    return "fe80:0000:0000:0000:" + node_guid


def _netdev(plan: Plan, tree: Tree, n: Netdev) -> None:
    d = n.dir
    ib = n.type == ARPHRD_INFINIBAND
    tree.file(f"{d}/address", n.address)
    tree.file(f"{d}/addr_len", "20" if ib else "6")
    tree.file(
        f"{d}/broadcast",
        IB_BROADCAST if ib else ("00:00:00:00:00:00" if n.kind == "loopback" else "ff:ff:ff:ff:ff:ff"),
    )
    tree.file(f"{d}/ifindex", str(n.ifindex))
    tree.file(f"{d}/iflink", str(n.ifindex))
    tree.file(f"{d}/mtu", str(n.mtu))
    tree.file(f"{d}/type", str(n.type))
    tree.file(f"{d}/dev_id", "0x0")
    tree.file(f"{d}/dev_port", str(n.dev_port))
    tree.file(f"{d}/carrier", "1" if n.carrier else "0")
    tree.file(f"{d}/tx_queue_len", "256" if ib else "1000")
    tree.file(
        f"{d}/uevent",
        ("DEVTYPE=bridge\n" if n.kind == "bridge" else "") + f"INTERFACE={n.name}\nIFINDEX={n.ifindex}",
    )
    if n.kind == "loopback":
        tree.file(f"{d}/flags", "0x9")
        tree.file(f"{d}/operstate", "unknown")
    else:
        tree.file(f"{d}/flags", "0x1003" if n.up else "0x1002")
        tree.file(f"{d}/operstate", "up" if n.up and n.carrier else "down")
        tree.file(f"{d}/addr_assign_type", "0" if n.kind == "pci" else "3")
    if n.kind == "pci":
        assert n.function is not None
        tree.file(f"{d}/speed", str(n.speed))
        tree.file(f"{d}/duplex", "full" if n.carrier else "unknown")
        tree.file(f"{d}/name_assign_type", "4")
        tree.link(f"{d}/device", plan.function(n.function).dir)
    if n.kind == "bridge":
        tree.file(f"{d}/bridge/stp_state", "0")
        tree.file(f"{d}/bridge/forward_delay", "1500")
        tree.file(f"{d}/bridge/bridge_id", "8000." + n.address.replace(":", ""))
        tree.mkdir(f"{d}/brif")
    tree.link(f"{d}/subsystem", "sys/class/net")
    tree.link(f"sys/class/net/{n.name}", d)
    tree.mkdir(f"{d}/statistics")
    for stat in (
        "rx_bytes",
        "rx_packets",
        "rx_errors",
        "rx_dropped",
        "tx_bytes",
        "tx_packets",
        "tx_errors",
        "tx_dropped",
    ):
        tree.file(f"{d}/statistics/{stat}", "0")


def _hex_le(addr: ipaddress.IPv4Address) -> str:
    # /proc/net/route prints the 32-bit address as the little-endian host reads it
    return f"{int.from_bytes(addr.packed, 'little'):08X}"


def _route_line(iface: str, dest: str, gateway: str, flags: int, mask: str, metric: int = 0) -> str:
    return f"{iface}\t{dest}\t{gateway}\t{flags:04X}\t0\t0\t{metric}\t{mask}\t0\t0\t0".ljust(127) + "\n"


def _route6_line(dest: str, plen: int, gateway: str, metric: int, refcnt: int, flags: int, iface: str) -> str:
    zero = "0" * 32
    return (
        f"{dest} {plen:02x} {zero} 00 {gateway} {metric:08x} {refcnt:08x} 00000000 {flags:08x} {iface:>8}\n"
    )


def _routes(plan: Plan, tree: Tree) -> None:
    net = plan.spec.network
    uplink = plan.uplink
    lines = [ROUTE_HEADER.ljust(127) + "\n"]
    v6 = []
    zero = "0" * 32
    if uplink is not None:
        ip = net.uplink_ipv4
        lines.append(_route_line(uplink.name, "00000000", _hex_le(net.gateway_ipv4), 0x0003, "00000000", 100))
        subnet, mask = _hex_le(ip.network.network_address), _hex_le(ip.network.netmask)
        lines.append(_route_line(uplink.name, subnet, "00000000", 0x0001, mask, 100))
        if net.gateway_ipv6 is not None:
            gateway6 = net.gateway_ipv6.exploded.replace(":", "")
            v6.append(_route6_line(zero, 0, gateway6, 0x400, 1, 0x0003, uplink.name))
            v6.append(_route6_line("fe80" + "0" * 28, 64, zero, 0x100, 1, 0x0001, uplink.name))
    for v in net.virtual:
        if v.ipv4 is not None and v.up:
            subnet, mask = _hex_le(v.ipv4.network.network_address), _hex_le(v.ipv4.network.netmask)
            lines.append(_route_line(v.name, subnet, "00000000", 0x0001, mask))
    v6.append(_route6_line("0" * 31 + "1", 128, zero, 0, 2, 0x80200001, "lo"))
    tree.raw("proc/net/route", "".join(lines))
    tree.raw("proc/net/ipv6_route", "".join(v6))
    counters = "       0       0    0    0    0     0          0         0" * 2
    dev = [DEV_HEADER] + [f"{n.name:>6}:{counters}\n" for n in plan.netdevs]
    tree.raw("proc/net/dev", "".join(dev))


def _identity(plan: Plan, tree: Tree) -> None:
    tree.file("proc/sys/kernel/hostname", plan.spec.hostname)
    d = "sys/devices/virtual/dmi/id"
    for key, value in plan.spec.dmi:
        tree.file(f"{d}/{key}", value)
    tree.link("sys/class/dmi/id", d)
