"""NIC driver `nic.topodra.io`: PCI network functions with locality, health and a real netns move.

Light on purpose: the registry imports this for every CLI call; the driver itself (and iproute2
wrappers, the kubernetes client) load only in `create`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from topodra.drivers import flags

if TYPE_CHECKING:
    from topodra.drivers.nic.driver import NicDriver
    from topodra.drivers.registry import CommonOptions

NAME = "nic.topodra.io"


def _globs(text: str) -> tuple[str, ...]:
    return tuple(g.strip() for g in text.split(",") if g.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("NIC driver (nic.topodra.io)")
    g.add_argument(
        "--nic-allow-uplink",
        action="store_true",
        help="also publish the interface(s) holding the default route or the node IP (and their ports)",
    )
    g.add_argument(
        "--nic-allow-stacked",
        action="store_true",
        help="also publish interfaces stacked with others of the host: ports of a bond, bridge, team "
        "or VRF, parents of VLANs or macvlans, bonds and bridges with ports (moving one breaks the other)",
    )
    g.add_argument(
        "--nic-allow-pf-with-vfs",
        action="store_true",
        help="also publish SR-IOV physical functions that have VFs enabled (their holder controls "
        "the VFs' MAC, VLAN and link state, whoever holds the VFs)",
    )
    g.add_argument(
        "--nic-list-attributes",
        action="store_true",
        help="publish numaNode as a list: the node, then the same-socket nodes nearest to it "
        "(needs DRAListTypeAttributes)",
    )
    g.add_argument(
        "--nic-include-virtual",
        action="store_true",
        help="also publish virtual interfaces (veth, macvlan, ...), named net-<ifname>",
    )
    g.add_argument(
        "--nic-node-ip",
        action="append",
        type=flags.ip_address,
        default=None,
        metavar="IP",
        help="the node's InternalIP; its interface counts as uplink (repeatable; default: $NODE_IP)",
    )
    g.add_argument(
        "--nic-include-interfaces",
        type=_globs,
        default=(),
        metavar="GLOBS",
        help="comma-separated globs; publish only functions with a matching interface",
    )
    g.add_argument(
        "--nic-exclude-interfaces",
        type=_globs,
        default=(),
        metavar="GLOBS",
        help="comma-separated globs; never publish functions with a matching interface",
    )
    g.add_argument(
        "--nic-netdev-mode",
        choices=("hook", "cdi"),
        default="hook",
        help="how the interface gets into the pod: our createRuntime hook (any CDI runtime) or CDI "
        "netDevices (cdiVersion 1.1.0; runtimes that support it)",
    )
    g.add_argument(
        "--nic-hook-dir",
        type=flags.absolute_path,
        default=Path("/opt/topodra/hooks"),
        help="host folder the hook is installed to and run from (default /opt/topodra/hooks)",
    )
    g.add_argument(
        "--nic-state-dir",
        type=flags.absolute_path,
        default=Path("/var/lib/topodra/nic"),
        help="host folder for pinned pod network namespaces (default /var/lib/topodra/nic)",
    )
    g.add_argument(
        "--nic-taint-unhealthy",
        action="store_true",
        help=f"taint unhealthy NICs {NAME}/unhealthy:NoSchedule in the ResourceSlice",
    )
    g.add_argument(
        "--nic-rescan-interval",
        type=flags.seconds,
        default=5.0,
        metavar="SECONDS",
        help="how often interfaces and PCI functions are compared with the last scan, and NICs "
        "inside pods are looked at (default 5); uevents are seen at once",
    )


def create(options: CommonOptions) -> NicDriver:
    from topodra.drivers.nic.devices import Selection
    from topodra.drivers.nic.driver import NicDriver, NicOptions

    a = options.args

    def get(name: str, default: Any) -> Any:
        return getattr(a, name, default)

    node_ips = get("nic_node_ip", None)
    if not node_ips:
        env = os.environ.get("NODE_IP", "")
        node_ips = [ip for ip in env.replace(",", " ").split() if ip]
        for ip in node_ips:
            try:
                flags.ip_address(ip)
            except argparse.ArgumentTypeError as e:
                raise ValueError(f"$NODE_IP: {e}") from None
    selection = Selection(
        allow_uplink=bool(get("nic_allow_uplink", False)),
        allow_stacked=bool(get("nic_allow_stacked", False)),
        allow_pf_with_vfs=bool(get("nic_allow_pf_with_vfs", False)),
        list_attributes=bool(get("nic_list_attributes", False)),
        include_virtual=bool(get("nic_include_virtual", False)),
        include_interfaces=tuple(get("nic_include_interfaces", ()) or ()),
        exclude_interfaces=tuple(get("nic_exclude_interfaces", ()) or ()),
    )
    return NicDriver(
        NicOptions(
            sysfs_root=str(options.sysfs_root),
            node_name=options.node_name,
            selection=selection,
            node_ips=tuple(str(ip) for ip in node_ips),
            netdev_mode=str(get("nic_netdev_mode", "hook")),
            hook_dir=Path(str(get("nic_hook_dir", "/opt/topodra/hooks"))),
            state_dir=Path(str(get("nic_state_dir", "/var/lib/topodra/nic"))),
            taint_unhealthy=bool(get("nic_taint_unhealthy", False)),
            rescan_interval=float(get("nic_rescan_interval", 5.0)),
        )
    )
