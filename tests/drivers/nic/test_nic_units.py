"""Small pieces: route and address parsing, the uplink's lower devices, interface-name rules
(checked against the running kernel), device names."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from topodra.common.hostnet.uplink import (
    find_uplinks,
    interfaces_holding,
    lower_closure,
    parse_if_inet6,
    parse_ipv4_routes,
    parse_ipv6_routes,
)
from topodra.drivers.nic.config import ifname_problem
from topodra.drivers.nic.devices import device_name_for_interface, device_name_for_pci

from tests.conftest import skip_or_fail
from tests.drivers.nic.conftest import netns_unavailable

ROUTE = """Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
bond0\t00000000\t0100000A\t0003\t0\t0\t100\t00000000\t0\t0\t0
bond0\t0000000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0
eth9\t00000000\t0100000A\t0203\t0\t0\t50\t00000000\t0\t0\t0
eth8\t00000000\t0100000A\t0002\t0\t0\t50\t00000000\t0\t0\t0
garbage line
"""

IPV6_ROUTE = """\
00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000002 00000000 00000003     ens5
fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000002 00000000 00000001     ens6
00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo
"""  # noqa: E501


def test_default_routes_ipv4() -> None:
    routes = parse_ipv4_routes(ROUTE)
    # eth9's default route is RTF_REJECT (unreachable), eth8's is not RTF_UP
    assert [(r.interface, r.metric) for r in routes] == [("bond0", 100)]


def test_default_routes_ipv6_skip_the_kernels_unreachable_default_on_lo() -> None:
    assert [(r.interface, r.family) for r in parse_ipv6_routes(IPV6_ROUTE)] == [("ens5", 6)]


def test_addresses_and_node_ip() -> None:
    inet6 = (
        "fd000000000000000000000000000002 02 80 00 80     eth0\n"
        "fe80000000000000000000fffe000001 02 40 20 80 eth0\n"
    )
    addrs = parse_if_inet6(inet6)
    assert addrs == {"eth0": ["fd00::2/128", "fe80::ff:fe00:1/64"]}
    assert interfaces_holding(addrs, ["fd00::2"]) == {"eth0"}
    assert interfaces_holding({"eno1": ["192.0.2.2/24"], "eno2": ["198.51.100.1"]}, ["192.0.2.2"]) == {"eno1"}
    assert interfaces_holding({"eno1": ["192.0.2.2/24"]}, ["not-an-ip", "203.0.113.9"]) == frozenset()


def _sysfs_with_bond(root: Path) -> None:
    """bond0 over eno1+eno2 (lower_ links), vlan eno3.10 over eno3, an Azure-style VF whose
    master is eth0 (no lower_ link on the master side), and an unrelated eno9."""
    net = root / "sys/class/net"
    for name in ("bond0", "eno1", "eno2", "eno3", "eno3.10", "eth0", "enP1s1", "eno9"):
        (net / name).mkdir(parents=True)
    (net / "bond0" / "lower_eno1").symlink_to("../eno1")
    (net / "bond0" / "lower_eno2").symlink_to("../eno2")
    (net / "eno1" / "master").symlink_to("../bond0")
    (net / "eno3.10" / "lower_eno3").symlink_to("../eno3")
    (net / "enP1s1" / "master").symlink_to("../eth0")
    (root / "proc/net").mkdir(parents=True)


def test_uplink_includes_the_devices_underneath(tmp_path: Path) -> None:
    _sysfs_with_bond(tmp_path)
    assert lower_closure(str(tmp_path), ["bond0"]) == {"bond0", "eno1", "eno2"}
    assert lower_closure(str(tmp_path), ["eno3.10"]) == {"eno3.10", "eno3"}
    assert lower_closure(str(tmp_path), ["eth0"]) == {"eth0", "enP1s1"}
    (tmp_path / "proc/net/route").write_text(ROUTE)
    assert find_uplinks(str(tmp_path)) == {"bond0", "eno1", "eno2"}


def test_device_names() -> None:
    assert device_name_for_pci("0000:3B:00.0") == "pci-0000-3b-00-0"
    assert device_name_for_pci("10000:e1:00.1") == "pci-10000-e1-00-1"
    assert device_name_for_interface("veth1") == "net-veth1"
    odd = device_name_for_interface("Eth_0.100")
    assert odd.startswith("net-eth-0-100-") and odd != device_name_for_interface("eth-0-100")
    long = device_name_for_interface("x" * 15)
    assert len(long) <= 63


# --- interface names against the kernel ----------------------------------------------------------

KERNEL_REFUSES = ["", ".", "..", "a/b", "a:b", "a b", "a\tb", "x" * 16, "all", "default", "eth%d"]


@pytest.fixture(scope="module")
def can_make_links() -> None:
    reason = netns_unavailable()
    if reason:
        skip_or_fail(reason)


def _kernel_accepts(name: str) -> bool | None:
    """Create a veth with that name (peer: a test name), delete it. None: the name exists."""
    if name not in ("", ".", "..") and "/" not in name and os.path.lexists(f"/sys/class/net/{name}"):
        return None
    peer = f"tdn{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        ["ip", "link", "add", "name", name, "type", "veth", "peer", "name", peer],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode == 0:
        subprocess.run(["ip", "link", "del", "dev", name], capture_output=True, check=False)
        return True
    subprocess.run(["ip", "link", "del", "dev", peer], capture_output=True, check=False)
    return False


@pytest.mark.parametrize("name", KERNEL_REFUSES)
def test_names_we_refuse_for_kernel_reasons_the_kernel_refuses(can_make_links: None, name: str) -> None:
    assert ifname_problem(name) is not None
    if name == "eth%d":
        return  # the kernel *accepts* it, as a pattern: the interface would be called eth0, eth1...
    assert _kernel_accepts(name) is False


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=15))
def test_every_name_we_accept_the_kernel_accepts(can_make_links: None, name: str) -> None:
    if ifname_problem(name) is not None:
        return
    assert _kernel_accepts(name) is not False, f"kernel refused {name!r}"
