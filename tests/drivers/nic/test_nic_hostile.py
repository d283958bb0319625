"""A tenant's NIC config never reaches the host's root shell as anything but an address.

The NIC config's `ips` end up as arguments of the netdev hook, which the runtime runs as root
on the host. `ipaddress` accepts IPv6 scope ids of any characters ("fe80::1%* 10.9.9.9/24"),
so the config takes only address characters, and the hook checks every argument again before
its first side effect (the CDI spec is a file on the host; a damaged or older one must not
move an interface it then cannot configure). When configuring fails after the move, the hook
gives the interface back to the host. The hook's log on the host is bounded.

Real driver, real hook (run as a runtime runs it: state JSON on stdin), real veth pairs and
network namespaces, all named `edg<hex>...` and removed afterwards.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from topodra.common.runtime.config import ConfigError
from topodra.common.runtime.driver import AllocatedDevice, ClaimRef
from topodra.drivers.nic import hookfiles

from tests.drivers.nic.conftest import Links, host_link, make_links, netns_links, process_in
from tests.drivers.nic.test_nic_driver import ENO2, NODE, driver_for, nic_config, tree  # noqa: F401

HOSTILE_IPS = [
    "fe80::1%* 10.9.9.9/24",  # a scope id that is a glob and a second word
    "fe80::1%eth0/64",  # a plain scope id: not an address the pod can be given either
    "192.0.2.5/24;reboot",
    "$(reboot)/24",
    "192.0.2.5/24\n--ip",
    "1" * 4096 + "/24",
]


@pytest.fixture
def edg() -> Iterator[Links]:
    yield from make_links("edg")


@pytest.fixture
def hook(tmp_path: Path) -> Path:
    path: Path = hookfiles.install(tmp_path / "hooks")
    return path


def run_hook(hook: Path, pid: int | None, *args: str, env: dict[str, str] | None = None) -> Any:
    state = json.dumps({"ociVersion": "1.0.2", "id": "c", "status": "creating", "pid": pid, "bundle": "/x"})
    return subprocess.run(
        ["/bin/sh", str(hook), *args],
        input=state if pid is not None else "{}",
        capture_output=True,
        text=True,
        timeout=30,
        env=env or {},
        check=False,
    )


@pytest.mark.parametrize("bad", HOSTILE_IPS, ids=range(len(HOSTILE_IPS)))
def test_config_takes_only_address_characters(tree: Path, tmp_path: Path, bad: str) -> None:  # noqa: F811
    d = driver_for(tree, tmp_path)
    ref = ClaimRef("tenant", "sneaky", "7a0c1f2e-0000-4000-8000-000000000004")
    with pytest.raises(ConfigError) as e:
        d.prepare(ref, [AllocatedDevice("nic", NODE, ENO2)], [nic_config(ips=["192.0.2.9/24", bad])])
    message = str(e.value)
    assert message.startswith("claim tenant/sneaky: config FromClaim #0, field 'ips[1]': "), message
    assert len(message) < 400  # a long value is quoted only in part
    assert d.held() == {}
    # and a good one still goes through to the hook as its own argument
    good = nic_config(ips=["fd00::5/64", "192.0.2.9/24"])
    prep = d.prepare(ref, [AllocatedDevice("nic", NODE, ENO2)], [good])
    args = list(prep.devices[0].edits.hooks[0].args)
    assert [args[i + 1] for i, a in enumerate(args) if a == "--ip"] == ["fd00::5/64", "192.0.2.9/24"]
    d.unprepare(ref, prep)


@pytest.mark.parametrize(
    ("flag", "bad"),
    [("--ip", ip) for ip in HOSTILE_IPS[:5]]
    + [("--name", "net 1"), ("--name", "a/b"), ("--mac", "aa:bb;x"), ("--pci", "0000:02:00.1/../..")],
    ids=lambda v: str(v)[:12],
)
def test_hook_refuses_a_bad_argument_before_touching_anything(
    edg: Links, hook: Path, tmp_path: Path, flag: str, bad: str
) -> None:
    peer_ns, pod_ns = edg.netns("p"), edg.netns("c")
    host, peer = edg.name("h0"), edg.name("q0")
    mac = edg.veth(host, peer, peer_ns)
    state = tmp_path / "state"
    edg.track_mount(str(state / "netns" / "c1_dev"))
    # a glob in an argument must stay text: a file it would match sits in the hook's folder
    (tmp_path / "10.9.9.9").write_text("")
    args = {"--host-name": host, "--name": "net1", "--mac": mac, "--ip": "192.0.2.9/24"}
    args[flag] = bad
    with process_in(pod_ns) as pid:
        argv = ["attach", "--state-dir", str(state), "--pin", "c1_dev"]
        for k, v in args.items():
            argv += [k, v]
        out = run_hook(hook, pid, *argv)
    assert out.returncode != 0
    assert f"{flag} must be" in out.stderr, out.stderr
    link = host_link(host)  # still on the host, under its own name, and nothing was pinned
    assert link is not None and link["address"] == mac
    assert "net1" not in netns_links(pod_ns)
    assert not (state / "netns" / "c1_dev").exists()


def test_hook_gives_the_interface_back_when_configuring_it_fails(
    edg: Links, hook: Path, tmp_path: Path
) -> None:
    """IPv6 is off in the pod: the address cannot be added after the move, so it moves back."""
    peer_ns, pod_ns = edg.netns("p"), edg.netns("c")
    host, peer = edg.name("h0"), edg.name("q0")
    mac = edg.veth(host, peer, peer_ns)
    subprocess.run(
        ["ip", "netns", "exec", pod_ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
         "net.ipv6.conf.default.disable_ipv6=1"],
        check=True,
    )  # fmt: skip
    state = tmp_path / "state"
    edg.track_mount(str(state / "netns" / "c1_dev"))
    with process_in(pod_ns) as pid:
        out = run_hook(
            hook, pid, "attach", "--state-dir", str(state), "--pin", "c1_dev", "--host-name", host,
            "--name", "net1", "--mac", mac, "--up", "--ip", "192.0.2.9/24", "--ip", "fd00::5/64",
        )  # fmt: skip
        inside = netns_links(pod_ns)
    assert out.returncode != 0
    assert "cannot add address fd00::5/64 to net1" in out.stderr, out.stderr
    assert f"gave net1 back to the host as {host}" in out.stderr
    assert "net1" not in inside
    link = host_link(host)
    assert link is not None and link["address"] == mac


def test_hook_log_is_bounded(hook: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    limit = 1000
    for i in range(40):
        out = run_hook(
            hook, None, "pin", "--state-dir", str(state), "--pin", f"claim-{i:02d}",
            env={"TOPODRA_HOOK_LOG_MAX": str(limit)},
        )  # fmt: skip
        assert out.returncode != 0 and "no pid" in out.stderr
    log, old = state / "hook.log", state / "hook.log.1"
    line = max(len(x) for x in log.read_text().splitlines()) + 1
    assert log.stat().st_size < limit + line
    assert old.exists() and old.stat().st_size < limit + line
    assert "claim-39" in log.read_text()  # the newest lines are the ones kept
    assert sorted(p.name for p in state.iterdir()) == ["hook.log", "hook.log.1"]


def test_a_long_ip_list_is_refused_before_any_entry_is_read(tree: Path, tmp_path: Path) -> None:  # noqa: F811
    """The list bound of the CPU driver's CPU lists, for the NIC's one list: 10,000 entries (each a
    valid address, so only the count can refuse them) cost nothing past the count and never
    reach the hook's arguments."""
    d = driver_for(tree, tmp_path)
    ref = ClaimRef("tenant", "many", "7a0c1f2e-0000-4000-8000-000000000005")
    many = [f"10.{i >> 8 & 255}.{i & 255}.1/32" for i in range(10_000)]
    with pytest.raises(ConfigError) as e:
        d.prepare(ref, [AllocatedDevice("nic", NODE, ENO2)], [nic_config(ips=many)])
    message = str(e.value)
    assert message.startswith("claim tenant/many: config FromClaim #0, field 'ips': "), message
    assert "at most 16" in message and len(message) < 400
    assert d.held() == {}
