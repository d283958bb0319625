"""The node's pod network: one Linux bridge with an address, the CNI bridge plugin on it.

The bridge carries the node's address (`NodeNetwork.node_ip`): the kubelet, the API server and
the Pods all meet there, and nothing leaves the machine. Pods get an eth0 on the bridge with
an address from host-local but no default route (`isGateway: false`, no masquerade), so they
reach the node's address on the bridge's own subnet and nothing else. The first addresses of
the subnet form the Service range, whose first address (the `kubernetes` Service's ClusterIP)
is the node address itself: the API server listens there on 443, so a Pod's in-cluster
configuration (KUBERNETES_SERVICE_HOST/PORT) reaches it without kube-proxy.

Names carry the prefix `tdrn` (topodra real node): `tdrn0` is the bridge.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

PREFIX = "tdrn"
NETWORK_NAME = "topodra-node"


@dataclass(frozen=True)
class NodeNetwork:
    subnet: ipaddress.IPv4Network  # a /24 no route of this machine overlaps
    bridge: str = f"{PREFIX}0"

    @property
    def node_ip(self) -> str:
        return str(self.subnet.network_address + 1)

    @property
    def service_range(self) -> str:
        """The first 16 addresses: the `kubernetes` Service gets the first one, the node's."""
        return str(ipaddress.ip_network(f"{self.subnet.network_address}/28"))

    @property
    def pod_range(self) -> tuple[str, str]:
        return str(self.subnet.network_address + 16), str(self.subnet.broadcast_address - 1)

    def conflist(self, ipam_dir: Path) -> dict[str, object]:
        first, last = self.pod_range
        return {
            "cniVersion": "1.0.0",
            "name": NETWORK_NAME,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": False,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        # host-local keeps its leases in /var/lib/cni unless told otherwise.
                        "dataDir": str(ipam_dir),
                        "ranges": [[{"subnet": str(self.subnet), "rangeStart": first, "rangeEnd": last}]],
                    },
                },
                {"type": "loopback"},
            ],
        }

    def write_conf(self, conf_dir: Path, ipam_dir: Path) -> Path:
        conf_dir.mkdir(parents=True, exist_ok=True)
        path = conf_dir / "10-topodra-node.conflist"
        path.write_text(json.dumps(self.conflist(ipam_dir), indent=2) + "\n")
        return path

    def create(self) -> None:
        """The bridge with the node's address, before anything binds to it."""
        self.delete()
        _ip("link", "add", "name", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.node_ip}/{self.subnet.prefixlen}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def delete(self) -> None:
        if link_exists(self.bridge):
            _ip("link", "del", self.bridge)


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True, timeout=30).returncode == 0


def routed_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 destination this machine routes (to refuse a pod subnet that overlaps one)."""
    out: list[ipaddress.IPv4Network] = []
    for line in _ip("-4", "route", "show", "table", "all").splitlines():
        dest = line.split()[0] if line.split() else ""
        if dest in ("default", "broadcast", "local", "multicast", "unreachable", "blackhole", "prohibit"):
            dest = line.split()[1] if dest != "default" else ""
        if not dest:
            continue
        try:
            net = ipaddress.ip_network(dest, strict=False)
        except ValueError:
            continue
        if isinstance(net, ipaddress.IPv4Network):
            out.append(net)
    return out


def pick_network(subnet: str, bridge: str = f"{PREFIX}0") -> NodeNetwork:
    """The node network on `subnet`, refused when the machine already routes part of it."""
    net = ipaddress.ip_network(subnet)
    if not isinstance(net, ipaddress.IPv4Network) or net.prefixlen > 24:
        raise ValueError(f"node subnet {subnet} must be IPv4 and at least a /24")
    clash = [r for r in routed_networks() if r.overlaps(net) and r.prefixlen > 0]
    own = [r for r in clash if _route_dev(r) == bridge]
    if len(clash) > len(own):
        raise RuntimeError(f"node subnet {subnet} overlaps routes of this machine: {clash}")
    return NodeNetwork(net, bridge)


def _route_dev(net: ipaddress.IPv4Network) -> str | None:
    words = _ip("-4", "route", "show", str(net)).split()
    return words[words.index("dev") + 1] if "dev" in words else None
