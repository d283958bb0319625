"""The NIC driver object: prepare/unprepare/restore, retained devices, health and taints.

Hardware states that cannot be produced on this machine (a PCI NIC losing its link, a PCI NIC
vanishing while inside a pod) are produced in a synthetic sysfs tree by editing its files, the
way the kernel would change them; virtual interfaces are real veths.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from topodra.common.cdi.spec import CdiWriter, SpecDevice, build_spec
from topodra.common.device import device_from_api
from topodra.common.inventory import signature
from topodra.common.publisher.build import build_desired
from topodra.common.runtime.checkpoint import Checkpoint
from topodra.common.runtime.claims import ClaimManager, cdi_kind
from topodra.common.runtime.config import ConfigError
from topodra.common.runtime.driver import AllocatedDevice, Health, OpaqueConfig, PrepareError
from topodra.drivers.nic.devices import DRIVER, Selection
from topodra.drivers.nic.driver import NicDriver, NicOptions

from tests.drivers.nic.conftest import SynthTree, host_link, process_in, vf_rdma
from tests.kit.claims import claim_ref as claim
from tests.kit.inventory import health, published_list
from tests.unit.runtime_claims.claimkit import MemoryClaimStore, Result, claim_object, new_uid

TAINT_KEY = f"{DRIVER}/unhealthy"  # the inventory's default for a driver's taints

NODE = "node-a"
ENO2 = "pci-0000-02-00-1"  # 1s-4acc: eno2 on 0000:02:00.1 (eno1 is the uplink)


def nic_config(requests: tuple[str, ...] = (), **params: Any) -> OpaqueConfig:
    return OpaqueConfig(
        "FromClaim", requests, {"apiVersion": "nic.topodra.io/v1alpha1", "kind": "NicConfig", **params}
    )


@pytest.fixture
def tree(synth_machine: Callable[[str], SynthTree], tmp_path: Path) -> Path:
    """A private copy of 1s-4acc that a test may edit."""
    root = tmp_path / "machine"
    shutil.copytree(synth_machine("1s-4acc").root, root, symlinks=True)
    return root


def driver_for(root: Path, tmp_path: Path, **kw: Any) -> NicDriver:
    opts = NicOptions(
        sysfs_root=str(root),
        node_name=NODE,
        hook_dir=tmp_path / "hooks",
        state_dir=tmp_path / "state",
        rescan_interval=0.0,
        release_settle=0.2,
        **kw,
    )
    return NicDriver(opts)


def iface_file(root: Path, ifname: str, name: str) -> Path:
    return (root / "sys/class/net" / ifname).resolve() / name


def test_link_down_is_unhealthy_and_tainted_and_recovers_on_link_up(tree: Path, tmp_path: Path) -> None:
    d = driver_for(tree, tmp_path, taint_unhealthy=True)
    assert health(d)[ENO2].health is Health.HEALTHY
    assert not next(x for x in published_list(d) if x.name == ENO2).taints

    iface_file(tree, "eno2", "carrier").write_text("0\n")
    iface_file(tree, "eno2", "operstate").write_text("down\n")
    h = health(d)[ENO2]
    assert h.health is Health.UNHEALTHY and "down" in h.message
    dev = next(x for x in published_list(d) if x.name == ENO2)
    assert [(t.key, t.value, t.effect) for t in dev.taints] == [(TAINT_KEY, "LinkDown", "NoSchedule")]
    desired = build_desired(DRIVER, NODE, None, published_list(d))
    assert desired.problems == ()
    for obj in desired.slices:
        body = json.loads(json.dumps(obj))
        body["metadata"]["name"] = body["metadata"]["generateName"] + "abcde"
        for version in ("1.34.0", "1.37.0"):
            kubernetes_validate.validate(body, version, strict=True)

    iface_file(tree, "eno2", "operstate").write_text("up\n")
    h = health(d)[ENO2]
    assert h.health is Health.UNHEALTHY and h.message == "eno2: no carrier"

    iface_file(tree, "eno2", "carrier").write_text("1\n")
    assert health(d)[ENO2].health is Health.HEALTHY
    assert not next(x for x in published_list(d) if x.name == ENO2).taints


def test_no_taint_unless_asked_and_admin_down_is_unknown(tree: Path, tmp_path: Path) -> None:
    d = driver_for(tree, tmp_path)
    iface_file(tree, "eno2", "operstate").write_text("down\n")
    assert health(d)[ENO2].health is Health.UNHEALTHY
    assert not next(x for x in published_list(d) if x.name == ENO2).taints
    iface_file(tree, "eno2", "flags").write_text("0x1002\n")  # IFF_UP cleared: nobody brought it up
    h = health(d)[ENO2]
    assert h.health is Health.UNKNOWN and "administratively down" in h.message


def move_into_pod(root: Path, ifname: str) -> None:
    """What the host's sysfs shows once the netdev is in another namespace: it is gone."""
    target = (root / "sys/class/net" / ifname).resolve()
    (root / "sys/class/net" / ifname).unlink()
    shutil.rmtree(target)


def test_allocated_nic_stays_published_from_inside_a_pod_until_released(tree: Path, tmp_path: Path) -> None:
    d = driver_for(tree, tmp_path, taint_unhealthy=True)
    before = next(x for x in published_list(d) if x.name == ENO2)
    ref = claim()
    prep = d.prepare(ref, [AllocatedDevice("nic", NODE, ENO2)], [nic_config(interfaceName="net1")])
    saved_tree = tmp_path / "eno2-saved"
    shutil.copytree((tree / "sys/class/net/eno2").resolve(), saved_tree, symlinks=True)
    move_into_pod(tree, "eno2")

    # the scheduler keeps seeing it, with the attributes it had on the host
    published = {x.name: x for x in published_list(d)}
    assert published[ENO2] == before
    assert published[ENO2].attributes[f"{DRIVER}/interfaceName"] == "eno2"
    assert health(d)[ENO2].health is Health.UNKNOWN  # the hook never pinned a namespace here

    # a driver restart learns it from the checkpointed preparation
    d2 = driver_for(tree, tmp_path, taint_unhealthy=True)
    d2.restore({ref: prep})
    assert {x.name: x for x in published_list(d2)}[ENO2] == before

    # the function disappears while in the pod: removed -> unhealthy and tainted, still published
    fn = tree / "sys/bus/pci/devices/0000:02:00.1"
    fn_target = fn.resolve()
    fn_link = os.readlink(fn)
    fn.unlink()
    h = health(d)[ENO2]
    assert h.health is Health.UNHEALTHY and h.message == "device removed"
    dev = next(x for x in published_list(d) if x.name == ENO2)
    assert [t.value for t in dev.taints] == ["DeviceRemoved"]

    # unprepare cannot find it: the claim stays prepared (error), nothing is forgotten
    with pytest.raises(PrepareError, match="will retry"):
        d.unprepare(ref, prep)
    assert ENO2 in d.held()
    assert ENO2 in {x.name for x in published_list(d)}

    # it comes back (the kernel returns physical NICs to the host when the pod's netns dies)
    fn.symlink_to(fn_link)
    assert fn_target.exists()
    shutil.copytree(saved_tree, fn_target / "net" / "eno2", symlinks=True)
    (tree / "sys/class/net/eno2").symlink_to(
        os.path.relpath(fn_target / "net" / "eno2", tree / "sys/class/net")
    )
    d.unprepare(ref, prep)
    assert ENO2 not in d.held()
    assert next(x for x in published_list(d) if x.name == ENO2) == before


def test_prepare_edits_for_the_hook_path(tree: Path, tmp_path: Path) -> None:
    d = driver_for(tree, tmp_path)
    ref = claim()
    prep = d.prepare(
        ref, [AllocatedDevice("nic", NODE, ENO2)], [nic_config(interfaceName="net1", ips=["192.0.2.5/24"])]
    )
    (dev,) = prep.devices
    (hook,) = dev.edits.hooks
    assert hook.hook_name == "createRuntime"
    assert hook.path == str(tmp_path / "hooks" / "netdev.sh")
    assert Path(hook.path).read_bytes().startswith(b"#!/bin/sh")
    assert os.access(hook.path, os.X_OK)
    args = list(hook.args)
    assert args[:2] == ["netdev.sh", "attach"]
    pairs = dict(zip(args[2::2], args[3::2], strict=False))
    mac = (tree / "sys/class/net/eno2/address").read_text().strip()
    assert pairs["--host-name"] == "eno2" and pairs["--name"] == "net1"
    assert pairs["--mac"] == mac and pairs["--pci"] == "0000:02:00.1"
    assert pairs["--pin"] == f"{ref.uid}_{ENO2}" and pairs["--state-dir"] == str(tmp_path / "state")
    assert "--ip" in args and "192.0.2.5/24" in args
    assert "--up" in args
    env = dict(e.split("=", 1) for e in dev.edits.env)
    assert env["TOPODRA_NIC_PCI_0000_02_00_1_PCI_ADDRESS"] == "0000:02:00.1"
    assert env["TOPODRA_NIC_PCI_0000_02_00_1_INTERFACE"] == "net1"
    assert not dev.edits.net_devices
    spec = build_spec(f"{DRIVER}/claim", [SpecDevice(f"{ref.uid}-{ENO2}", dev.edits)], prep.claim_edits)
    assert spec["cdiVersion"] in ("0.3.0", "0.5.0")  # podman 4.3 reads up to 0.5.0
    json.dumps(dict(prep.state))
    d.unprepare(ref, prep)
    down = d.prepare(claim("c2"), [AllocatedDevice("nic", NODE, ENO2)], [nic_config(linkUp=False)])
    assert "--up" not in down.devices[0].edits.hooks[0].args
    assert "--name" in down.devices[0].edits.hooks[0].args  # the host name is kept
    args2 = list(down.devices[0].edits.hooks[0].args)
    assert args2[args2.index("--name") + 1] == "eno2"


def test_prepare_edits_for_cdi_netdevices(tree: Path, tmp_path: Path) -> None:
    d = driver_for(tree, tmp_path, netdev_mode="cdi")
    ref = claim()
    prep = d.prepare(ref, [AllocatedDevice("nic", NODE, ENO2)], [nic_config(interfaceName="net1")])
    (dev,) = prep.devices
    assert [(n.host_interface_name, n.name) for n in dev.edits.net_devices] == [("eno2", "net1")]
    (hook,) = dev.edits.hooks
    assert list(hook.args[:2]) == ["netdev.sh", "pin"]
    spec = build_spec(f"{DRIVER}/claim", [SpecDevice(f"{ref.uid}-{ENO2}", dev.edits)], prep.claim_edits)
    assert spec["cdiVersion"] == "1.1.0"
    assert spec["devices"][0]["containerEdits"]["netDevices"] == [
        {"hostInterfaceName": "eno2", "name": "net1"}
    ]
    d.unprepare(ref, prep)
    with pytest.raises(ConfigError, match="needs --nic-netdev-mode hook"):
        d.prepare(claim("c2"), [AllocatedDevice("nic", NODE, ENO2)], [nic_config(ips=["192.0.2.5/24"])])


def test_rdma_function_gets_its_verbs_device(
    synth_machine: Callable[[str], SynthTree], tmp_path: Path
) -> None:
    t = synth_machine("2s-snc2")
    m = t.manifest
    rdma = vf_rdma(m)
    dev_name = "pci-" + rdma["pci"].replace(":", "-").replace(".", "-")
    d = driver_for(t.root, tmp_path)
    ref = claim()
    prep = d.prepare(ref, [AllocatedDevice("nic", NODE, dev_name)], [])
    (p,) = prep.devices
    major, minor = (
        (t.root / f"sys/class/infiniband_verbs/{rdma['uverbs']}/dev").read_text().strip().split(":")
    )
    assert [(n.path, n.type, n.major, n.minor) for n in p.edits.device_nodes] == [
        (f"/dev/infiniband/{rdma['uverbs']}", "c", int(major), int(minor))
    ]
    env = dict(e.split("=", 1) for e in p.edits.env)
    assert env[f"TOPODRA_NIC_{dev_name.upper().replace('-', '_')}_RDMA_DEVICE"] == rdma["name"]
    d.unprepare(ref, prep)


def test_an_sriov_pf_with_vfs_is_handed_out_only_when_allowed(
    synth_machine: Callable[[str], SynthTree], tmp_path: Path
) -> None:
    """A PF's holder sets its VFs' MAC, VLAN, trust and link state: by default the VFs are
    published and the PF is not, and a claim allocated it (from an older slice) is told why."""
    t = synth_machine("2s-snc2")
    pf = next(p for p in t.manifest["pci"] if p["virtfns"])
    name = "pci-" + pf["bdf"].replace(":", "-").replace(".", "-")
    vfs = {"pci-" + v.replace(":", "-").replace(".", "-") for v in pf["virtfns"]}
    d = driver_for(t.root, tmp_path)
    published = {dev.name for dev in published_list(d)}
    assert vfs <= published and name not in published
    with pytest.raises(PrepareError, match=f"is the physical function of {len(vfs)} enabled VFs"):
        d.prepare(claim(), [AllocatedDevice("nic", NODE, name)], [])
    assert d.held() == {}
    allowed = driver_for(t.root, tmp_path / "allowed", selection=Selection(allow_pf_with_vfs=True))
    assert name in {dev.name for dev in published_list(allowed)}
    ref = claim()
    prep = allowed.prepare(ref, [AllocatedDevice("nic", NODE, name)], [])
    allowed.unprepare(ref, prep)


def test_bad_claims_are_refused_with_a_clear_message(tree: Path, tmp_path: Path) -> None:
    d = driver_for(tree, tmp_path)
    r = [AllocatedDevice("nic", NODE, ENO2)]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"interfaceName": "a/b"}, "must not contain '/'"),
        ({"interfaceName": "x" * 16}, "at most 15 bytes"),
        ({"interfaceName": ".."}, "'.' or '..'"),
        ({"interfaceName": "net 1"}, "whitespace"),
        ({"interfaceName": "lo"}, "loopback"),
        ({"ips": ["192.0.2.5"]}, "prefix length"),
        ({"ips": ["300.0.0.1/24"]}, "not an IP address"),
        ({"mtu": 9000}, "unknown field"),
    ]
    for params, text in cases:
        with pytest.raises(ConfigError, match=text) as e:
            d.prepare(claim(), r, [nic_config(**params)])
        assert "claim ns1/c1" in str(e.value)
    with pytest.raises(ConfigError, match="apiVersion"):
        d.prepare(claim(), r, [OpaqueConfig("FromClaim", (), {"apiVersion": "v9", "kind": "NicConfig"})])
    with pytest.raises(PrepareError, match="not on this node"):
        d.prepare(claim(), [AllocatedDevice("nic", NODE, "pci-0000-99-00-0")], [])
    # the uplink is not a device at all, and the claim is told why
    with pytest.raises(PrepareError, match="not handed out: interface eno1 carries the node's own traffic"):
        d.prepare(claim(), [AllocatedDevice("nic", NODE, "pci-0000-02-00-0")], [])
    first = claim("first")
    prep = d.prepare(first, r, [])
    with pytest.raises(PrepareError, match="held by claim ns1/first"):
        d.prepare(claim("second"), r, [])
    d.unprepare(first, prep)
    assert d.held() == {}


class RecordingInventory:
    """The driver's handle on its inventory, recording what the driver asks of it."""

    def __init__(self) -> None:
        self.rescans = 0

    def request_rescan(self) -> None:
        self.rescans += 1

    def report_health(self, health: Any, *, valid_for: float) -> None:
        pass


def test_every_unprepare_asks_for_a_scan(tree: Path, tmp_path: Path) -> None:
    """A released interface is back on the host, to be published again without waiting for the
    next signature poll; the runtime no longer scans after every driver's unprepare, so the NIC
    driver asks itself, also when the release failed (part of it may be back)."""
    d = driver_for(tree, tmp_path)
    inventory = RecordingInventory()
    d.bind_inventory(inventory)
    prep = d.prepare(claim(), [AllocatedDevice("nic", NODE, ENO2, admin_access=True)], [])
    assert inventory.rescans == 0
    d.unprepare(claim(), prep)
    assert inventory.rescans == 1
    prep = d.prepare(claim(), [AllocatedDevice("nic", NODE, ENO2)], [])
    fn = tree / "sys/bus/pci/devices/0000:02:00.1"
    link = os.readlink(fn)
    move_into_pod(tree, "eno2")
    fn.unlink()  # gone from the host: the release cannot find it
    with pytest.raises(PrepareError):
        d.unprepare(claim(), prep)
    assert inventory.rescans == 2
    fn.symlink_to(link)


def test_two_devices_cannot_get_the_same_pod_name(
    synth_machine: Callable[[str], SynthTree], tmp_path: Path
) -> None:
    t = synth_machine("2s-8acc-8nic")
    d = driver_for(t.root, tmp_path)
    names = sorted(n for n in d.nics() if d.nics()[n].interface)[:2]
    with pytest.raises(ConfigError, match="would both be named 'net1'"):
        d.prepare(
            claim(), [AllocatedDevice("nic", NODE, n) for n in names], [nic_config(interfaceName="net1")]
        )
    assert d.held() == {}


def test_admin_access_moves_nothing(tree: Path, tmp_path: Path) -> None:
    d = driver_for(tree, tmp_path)
    prep = d.prepare(claim(), [AllocatedDevice("nic", NODE, ENO2, admin_access=True)], [])
    assert not prep.devices[0].edits.hooks and not prep.devices[0].edits.net_devices
    assert d.held() == {}


def test_device_round_trips_through_the_checkpoint_form(tree: Path, tmp_path: Path) -> None:
    d = driver_for(tree, tmp_path)
    for dev in published_list(d):
        assert device_from_api(json.loads(json.dumps(dev.to_api()))) == dev


# --- real interfaces ------------------------------------------------------------------------------


def test_virtual_interfaces_only_on_request(links: Any, tmp_path: Path) -> None:
    peer_ns = links.netns("p")
    host = links.name("h0")
    links.veth(host, links.name("q0"), peer_ns)
    sel = Selection(include_interfaces=(f"tdn{links.tag}*",))
    off = NicDriver(NicOptions(selection=sel, state_dir=tmp_path, hook_dir=tmp_path))
    assert published_list(off) == []
    on = NicDriver(
        NicOptions(
            selection=Selection(include_virtual=True, include_interfaces=(f"tdn{links.tag}*",)),
            state_dir=tmp_path,
            hook_dir=tmp_path,
        )
    )
    (dev,) = published_list(on)
    assert dev.name == f"net-{host}"
    assert dev.attributes[f"{DRIVER}/virtual"] is True
    assert (
        dev.attributes[f"{DRIVER}/macAddress"] == Path(f"/sys/class/net/{host}/address").read_text().strip()
    )


def test_interfaces_stacked_with_others_of_the_host_are_withheld(links: Any, tmp_path: Path) -> None:
    """Real bridge, veth and macvlan. Moving a bridge port into a pod takes it out of the bridge,
    and moving a macvlan's parent leaves the host's macvlan on a link the pod controls (both
    seen by hand on this machine's kernel), so neither is published or prepared unless
    --nic-allow-stacked; and a bridge with ports is not either (the kernel refuses to move a
    bridge at all)."""
    peer_ns = links.netns("p")
    port, parent, br = links.name("h0"), links.name("h1"), links.name("b0")
    links.veth(port, links.name("q0"), peer_ns)
    links.veth(parent, links.name("q1"), peer_ns)
    links.bridge(br)
    mine = (f"tdn{links.tag}*",)
    d = NicDriver(
        NicOptions(
            selection=Selection(include_virtual=True, include_interfaces=mine),
            state_dir=tmp_path / "state",
            hook_dir=tmp_path / "hooks",
            rescan_interval=0.0,
        )
    )
    everyone = {f"net-{port}", f"net-{parent}", f"net-{br}"}
    assert {dev.name for dev in published_list(d)} == everyone

    before = signature.read(d.inventory_policy())
    subprocess.run(["ip", "link", "set", port, "master", br], check=True)
    # no uevent comes for this: the polled signature must see it
    assert signature.read(d.inventory_policy()) != before
    macvlan = links.name("m1")
    subprocess.run(["ip", "link", "add", "link", parent, "name", macvlan, "type", "macvlan"], check=True)
    links.links.append(macvlan)

    assert {dev.name for dev in published_list(d)} == {f"net-{macvlan}"}  # a macvlan itself may move
    withheld = f"net-{port} is not handed out: interface {port} is a port of {br}"
    with pytest.raises(PrepareError, match=withheld):
        d.prepare(claim(), [AllocatedDevice("nic", NODE, f"net-{port}")], [])
    with pytest.raises(PrepareError, match=f"interface {parent} carries {macvlan}"):
        d.prepare(claim(), [AllocatedDevice("nic", NODE, f"net-{parent}")], [])
    with pytest.raises(PrepareError, match=f"interface {br} has ports \\({port}\\)"):
        d.prepare(claim(), [AllocatedDevice("nic", NODE, f"net-{br}")], [])
    assert d.held() == {}

    allowed = NicDriver(
        NicOptions(
            selection=Selection(include_virtual=True, include_interfaces=mine, allow_stacked=True),
            state_dir=tmp_path / "state2",
            hook_dir=tmp_path / "hooks2",
            install_hook=False,
        )
    )
    assert {dev.name for dev in published_list(allowed)} == everyone | {f"net-{macvlan}"}
    prep = allowed.prepare(claim(), [AllocatedDevice("nic", NODE, f"net-{port}")], [])
    (hook,) = prep.devices[0].edits.hooks
    assert hook.args[-1] == "--allow-stacked"  # the hook's own check at the move stands down too

    subprocess.run(["ip", "link", "set", port, "nomaster"], check=True)
    assert f"net-{port}" in {dev.name for dev in published_list(d)}


def test_veth_health_follows_its_carrier(links: Any, tmp_path: Path) -> None:
    """Link up/down on a real veth. IPv6 is off on both ends and no address is set, so bringing
    the links up sends nothing."""
    peer_ns = links.netns("p")
    host, peer = links.name("h0"), links.name("q0")
    links.veth(host, peer, peer_ns)
    subprocess.run(["sysctl", "-qw", f"net.ipv6.conf.{host}.disable_ipv6=1"], check=True)
    subprocess.run(
        ["ip", "netns", "exec", peer_ns, "sysctl", "-qw", f"net.ipv6.conf.{peer}.disable_ipv6=1"], check=True
    )
    d = NicDriver(
        NicOptions(
            selection=Selection(include_virtual=True, include_interfaces=(f"tdn{links.tag}*",)),
            state_dir=tmp_path,
            hook_dir=tmp_path,
            taint_unhealthy=True,
            rescan_interval=0.0,
        )
    )
    name = f"net-{host}"
    assert health(d)[name].health is Health.UNKNOWN  # admin down on the host
    subprocess.run(["ip", "link", "set", host, "up"], check=True)
    h = health(d)[name]
    assert h.health is Health.UNHEALTHY, h
    assert [t.value for t in published_list(d)[0].taints] == ["LinkDown"] or [
        t.value for t in published_list(d)[0].taints
    ] == ["NoCarrier"]
    subprocess.run(["ip", "-n", peer_ns, "link", "set", peer, "up"], check=True)
    for _ in range(50):
        if health(d)[name].health is Health.HEALTHY:
            break
        subprocess.run(["sleep", "0.05"], check=False)
    assert health(d)[name].health is Health.HEALTHY
    assert published_list(d)[0].taints == ()


def test_interface_comes_home_when_the_pods_namespace_empties(links: Any, tmp_path: Path) -> None:
    """The hook from prepare's edits moves a veth into a "pod" (a process in a test namespace);
    while the process lives the driver leaves it there; once it is gone (only the pin holds the
    namespace) the next poll returns it to the host, and the claim stays prepared."""
    peer_ns, pod_ns = links.netns("p"), links.netns("c")
    host, peer = links.name("h0"), links.name("q0")
    mac = links.veth(host, peer, peer_ns)
    d = NicDriver(
        NicOptions(
            selection=Selection(include_virtual=True, include_interfaces=(f"tdn{links.tag}*",)),
            hook_dir=tmp_path / "hooks",
            state_dir=tmp_path / "state",
            rescan_interval=0.0,
        )
    )
    device = f"net-{host}"
    ref = claim()
    prep = d.prepare(ref, [AllocatedDevice("nic", NODE, device)], [nic_config(interfaceName="net3")])
    (hook,) = prep.devices[0].edits.hooks
    links.track_mount(str(tmp_path / "state" / "netns" / f"{ref.uid}_{device}"))
    with process_in(pod_ns) as pid:
        done = subprocess.run(
            [hook.path, *hook.args[1:]],
            input=json.dumps({"pid": pid}),
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        subprocess.run(["ip", "netns", "del", pod_ns], check=True)  # the process still holds it
        health(d)
        assert "net3" in netns_links_of(pid)
        assert host_link(host) is None
    # the process is gone: nobody but the pin holds the namespace
    health(d)
    link = host_link(host)
    assert link is not None and link["address"] == mac
    assert device in d.held()
    assert health(d)[device].health is Health.UNKNOWN  # home, admin down
    d.unprepare(ref, prep)
    assert d.held() == {} and host_link(host) is not None


def netns_links_of(pid: int) -> set[str]:
    out = subprocess.run(
        ["nsenter", "-t", str(pid), "-n", "ip", "-j", "link", "show"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {e["ifname"] for e in json.loads(out.stdout)}


def test_a_failed_cdi_write_rolls_the_driver_back(tree: Path, tmp_path: Path) -> None:
    """The claim core rolls back with only the device list (no driver state): the NIC must not
    stay held by a claim that never got prepared."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    d = driver_for(tree, tmp_path)
    store = MemoryClaimStore()
    bad = ClaimManager(
        d, NODE, store, Checkpoint(tmp_path / "ckpt", DRIVER), CdiWriter(blocker, cdi_kind(DRIVER))
    )
    bad.start()
    ref = store.put(claim_object("ns1", "c", new_uid(), [Result("nic", ENO2, driver=DRIVER)]))
    out = bad.prepare([ref])[ref.uid]
    assert "cannot write CDI spec" in out.error
    assert d.held() == {}
    again = d.prepare(claim("other"), [AllocatedDevice("nic", NODE, ENO2)], [])
    assert again.devices[0].device == ENO2
