"""Moving real interfaces between network namespaces and back (veth pairs, `ip netns add`).

The hook script is run exactly as a runtime runs it (state JSON on stdin, argv from the CDI
spec); a sleeping process in a test namespace stands in for the container's init. The peer
end of every veth lives in a namespace of its own, so the pair survives when the "pod" side dies.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from topodra.common.hostnet import iplink
from topodra.common.runtime.driver import ClaimRef
from topodra.common.topology import hostfiles
from topodra.drivers.nic import hookfiles
from topodra.drivers.nic.attach import (
    Attachment,
    ReleaseError,
    Where,
    in_pod,
    in_use,
    locate,
    recorded_made_with,
    release,
    restore_mac,
)

from tests.drivers.nic.conftest import Links, host_link, netns_links, process_in


def run_hook(
    hook: Path, pid: int, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    state = json.dumps({"ociVersion": "1.0.2", "id": "c", "status": "creating", "pid": pid, "bundle": "/x"})
    return subprocess.run(
        ["/bin/sh", str(hook), *args], input=state, capture_output=True, text=True, timeout=30, env=env or {}
    )


@pytest.fixture
def hook(tmp_path: Path) -> Path:
    path: Path = hookfiles.install(tmp_path / "hooks")
    return path


def attachment(links: Links, state: Path, host: str, mac: str, name: str, pin: str = "c1_dev") -> Attachment:
    links.track_mount(str(state / "netns" / pin))
    return Attachment(
        device="net-x",
        request="nic",
        pool="node-a",
        host_name=host,
        container_name=name,
        mac=mac,
        pci_address=None,
        virtual=True,
        mode="hook",
        pin=str(state / "netns" / pin),
    )


PCI = "0000:04:00.0"


def physical(att: Attachment) -> Attachment:
    """`att` as a PCI NIC at PCI (a veth stands in: no PCI NIC can be moved on this machine)."""
    return dataclasses.replace(att, pci_address=PCI, virtual=False)


def attach_args(links: Links, tmp_path: Path, host: str, name: str = "net1") -> list[str]:
    """The hook's attach arguments for pin c1_dev under tmp_path/state (the pin is unmounted at
    the end of the test)."""
    state = tmp_path / "state"
    links.track_mount(str(state / "netns" / "c1_dev"))
    return ["attach", "--state-dir", str(state), "--pin", "c1_dev", "--host-name", host, "--name", name]


def test_hook_moves_renames_and_pins_then_release_brings_it_back(
    links: Links, hook: Path, tmp_path: Path
) -> None:
    peer_ns, pod_ns = links.netns("p"), links.netns("c")
    host, peer = links.name("h0"), links.name("q0")
    mac = links.veth(host, peer, peer_ns)
    state = tmp_path / "state"
    att = attachment(links, state, host, mac, "net1")
    with process_in(pod_ns) as pid:
        args = ["attach", "--state-dir", str(state), "--pin", "c1_dev", "--host-name", host, "--name", "net1"]
        out = run_hook(hook, pid, *args, "--mac", mac, "--up", "--ip", "192.0.2.10/24")
        assert out.returncode == 0, out.stderr
        inside = netns_links(pod_ns)
        assert inside["net1"]["address"] == mac
        assert "UP" in inside["net1"]["flags"]  # up, but its peer is down: no carrier, no traffic
        assert host_link(host) is None
        assert iplink.is_pinned_netns(att.pin)
        assert iplink.addresses("net1", att.pin) == ["192.0.2.10/24"]
        # a second container of the same pod: already inside, the hook succeeds without a change
        again = run_hook(hook, pid, *args, "--mac", mac, "--up", "--ip", "192.0.2.10/24")
        assert again.returncode == 0, again.stderr
        assert "already in the container" in again.stderr
    # the "container" is gone and its namespace name removed: only the pin keeps it alive
    subprocess.run(["ip", "netns", "del", pod_ns], check=True)
    assert locate(att).place == "pinned"

    assert release(att) == f"moved back from the pinned namespace as {host}"
    link = host_link(host)
    assert link is not None and link["address"] == mac
    assert not Path(att.pin).exists()
    # idempotent: a second unprepare finds it home
    assert release(att) == "already on the host"


def test_a_sysfs_root_that_still_names_the_netdev_does_not_hide_the_pinned_interface(
    links: Links, hook: Path, tmp_path: Path
) -> None:
    """A --sysfs-root that is not the host's (a synthetic machine whose netdevs are veths of the
    same name and MAC) keeps listing the netdev under its PCI function while the interface is in
    the pod. Release must still find it in the pin and bring it back, not call it home and drop
    the pin (which destroyed the interface with the namespace, seen on the real-node tier)."""
    peer_ns, pod_ns = links.netns("p"), links.netns("c")
    host, peer = links.name("h5"), links.name("q5")
    mac = links.veth(host, peer, peer_ns)
    state = tmp_path / "state"
    pci = "0000:04:00.0"
    root = tmp_path / "machine"
    (root / "sys/bus/pci/devices" / pci / "net" / host).mkdir(parents=True)
    att = dataclasses.replace(attachment(links, state, host, mac, "net1"), pci_address=pci, virtual=False)
    with process_in(pod_ns) as pid:
        args = ["attach", "--state-dir", str(state), "--pin", "c1_dev", "--host-name", host, "--name", "net1"]
        out = run_hook(hook, pid, *args, "--mac", mac)
        assert out.returncode == 0, out.stderr
    subprocess.run(["ip", "netns", "del", pod_ns], check=True)
    assert locate(att, str(root)).place == "pinned"
    assert release(att, str(root)) == f"moved back from the pinned namespace as {host}"
    link = host_link(host)
    assert link is not None and link["address"] == mac
    assert locate(att, str(root)) == Where("host", host)


def test_release_takes_the_claims_interface_not_a_copy_the_pod_made(
    links: Links, hook: Path, tmp_path: Path
) -> None:
    """A pod with NET_ADMIN makes a veth of its own in its namespace and gives it the NIC's MAC;
    made there, it has a lower ifindex than the NIC, which kept the host's. Release must bring
    the claim's interface home under the host name, not the pod's copy."""
    peer_ns, pod_ns = links.netns("p"), links.netns("c")
    host = links.name("h6")
    mac = links.veth(host, links.name("q6"), peer_ns)
    ifindex = host_link(host)["ifindex"]  # type: ignore[index]
    att = attachment(links, tmp_path / "state", host, mac, "net1")
    with process_in(pod_ns) as pid:
        out = run_hook(hook, pid, *attach_args(links, tmp_path, host), "--mac", mac)
        assert out.returncode == 0, out.stderr
        ip = ["ip", "-n", pod_ns, "link"]
        subprocess.run([*ip, "add", "copy0", "type", "veth", "peer", "name", "copy1"], check=True)
        subprocess.run([*ip, "set", "dev", "copy0", "address", mac], check=True)
        inside = netns_links(pod_ns)
        assert inside["copy0"]["ifindex"] < inside["net1"]["ifindex"]  # listed first
        assert locate(att) == Where("pinned", "net1")
        assert release(att) == f"moved back from the pinned namespace as {host}"
    link = host_link(host)
    assert link is not None and link["ifindex"] == ifindex  # the claim's own interface
    assert "copy0" in netns_links(pod_ns)  # the copy stayed with the pod


def test_release_never_takes_a_host_interface_for_the_nic_by_a_mac_the_pod_chose(
    links: Links, hook: Path, tmp_path: Path
) -> None:
    """A pod with NET_ADMIN sets its NIC's MAC to the node uplink's. The NIC comes home with it
    (unprepare now sets it back; drivers before that did not), and the next prepare of that NIC
    records it. Unprepare must then look for the NIC under its
    PCI function or in the pin, never take the uplink (the host interface with that MAC) for it:
    what it finds is set down and renamed. A virtual interface is looked for by name on the host."""
    peer_ns, pod_ns = links.netns("p"), links.netns("c")
    uplink, nic = links.name("u0"), links.name("h0")
    forged = links.veth(uplink, links.name("v0"), peer_ns)  # the uplink's MAC, which the pod chose
    links.veth(nic, links.name("q0"), peer_ns)
    subprocess.run(["ip", "link", "set", "dev", nic, "address", forged], check=True)
    root = pci_function(tmp_path, PCI, nic).parent  # the PCI function still names its netdev
    att = physical(attachment(links, tmp_path / "state", nic, forged, "net1"))
    with process_in(pod_ns) as pid:
        seam = {"TOPODRA_HOOK_SYSFS": str(root / "sys")}
        out = run_hook(hook, pid, *attach_args(links, tmp_path, nic), "--mac", forged, "--pci", PCI, env=seam)
        assert out.returncode == 0, out.stderr
        assert host_link(uplink) is not None  # the hook took the NIC, under its PCI function
        assert locate(att, str(root)) == Where("pinned", "net1")
        subprocess.run(["ip", "-n", pod_ns, "link", "del", "net1"], check=True)  # gone from the pod too
        assert locate(att, str(root)) == Where("host", nic)  # the synthetic tree's word, not the uplink
        assert release(att, str(root)) == "already on the host"  # the tree's word; the uplink untouched
        virtual = dataclasses.replace(att, pci_address=None, virtual=True)
        assert locate(virtual) == Where("gone")
        assert release(virtual) == "gone with the pod's namespace (virtual interface)"
    assert host_link(uplink) is not None  # not renamed


def test_hook_takes_a_virtual_interface_by_its_name_and_reads_no_mac_from_an_alias(
    links: Links, hook: Path, tmp_path: Path
) -> None:
    """The hook's side of the same: a virtual interface that came home with the uplink's MAC
    (which the next prepare recorded) is taken by its name, never the uplink, which comes first
    by MAC. And an interface alias is free text a pod sets: `link/ether <MAC>` in one does not
    make an interface of the pod's look like the NIC already inside."""
    peer_ns, pod_ns = links.netns("p"), links.netns("c")
    uplink, nic = links.name("u0"), links.name("h0")
    forged = links.veth(uplink, links.name("v0"), peer_ns)
    links.veth(nic, links.name("q0"), peer_ns)
    subprocess.run(["ip", "link", "set", "dev", nic, "address", forged], check=True)
    ip = ["ip", "-n", pod_ns, "link"]
    subprocess.run([*ip, "add", "decoy", "type", "veth", "peer", "name", "decoy1"], check=True)
    subprocess.run([*ip, "set", "dev", "decoy", "alias", f"link/ether {forged}"], check=True)
    with process_in(pod_ns) as pid:
        out = run_hook(hook, pid, *attach_args(links, tmp_path, nic), "--mac", forged)
        assert out.returncode == 0, out.stderr
    assert host_link(uplink) is not None and host_link(nic) is None
    assert "net1" in netns_links(pod_ns)


def test_a_pci_nic_in_a_pod_is_known_by_its_device_not_its_mac_or_name() -> None:
    """Among a pod's links, a PCI function's netdev is the one the kernel shows over that
    function, whatever MAC and name the pod gave it and its copies. Link lists as `ip -d -j link`
    reads them: no PCI NIC can be moved into a namespace on this machine."""
    pci = "0000:3b:00.0"
    att = Attachment("pci-0000-3b-00-0", "nic", "node-a", "ens1f0", "net1", "0c:42:a1:00:00:01", pci,
                     virtual=False, mode="hook", pin="/x")  # fmt: skip

    def link(name: str, mac: str, ifindex: int, parent: tuple[str, str] | None = None) -> iplink.Link:
        return iplink.Link(name, ifindex, mac, "up", ("UP",), None, parent)

    copy = link("net1", att.mac or "", 2)  # the pod's copy, with the MAC and the name
    renamed = link("x", "02:00:00:00:00:09", 40, ("pci", pci))  # the NIC, MAC and name changed
    other_port = link("net2", "0c:42:a1:00:00:02", 41, ("pci", pci))  # the function's second port
    devices = frozenset({("pci", pci), ("virtio", "virtio2")})  # iplink.function_devices's answer
    assert in_pod(att, [copy, renamed], devices) is renamed
    mine = link("y", att.mac or "", 42, ("pci", pci))
    assert in_pod(att, [copy, other_port, mine], devices) is mine  # the MAC tells two ports apart
    assert in_pod(att, [copy, other_port, renamed], devices) is None  # which port is ours? neither taken
    # ... unless the kernel shows the address the port was made with (IFLA_PERM_ADDRESS)
    ours = dataclasses.replace(renamed, perm_mac=att.mac)
    sibling = dataclasses.replace(other_port, perm_mac="0c:42:a1:00:00:02")
    assert in_pod(att, [copy, sibling, ours], devices) is ours
    assert in_pod(att, [copy], devices) is None  # gone from the pod: not the copy
    virtio = link("eth1", "52:54:00:00:00:01", 43, ("virtio", "virtio2"))  # a netdev on a device below
    assert in_pod(att, [copy, virtio], devices) is virtio
    # a kernel that shows no devices (before 5.15), or a synthetic machine's stand-ins: the MAC
    assert in_pod(att, [renamed, copy], None) is copy


def test_an_interface_in_a_running_pods_namespace_is_in_use(links: Links, hook: Path, tmp_path: Path) -> None:
    """What reconcile asks before it releases a claim the API server dropped: while a process
    lives in the pinned namespace, the interface is a running pod's; once none does, it is not."""
    peer_ns, pod_ns = links.netns("p"), links.netns("c")
    host = links.name("h4")
    mac = links.veth(host, links.name("q4"), peer_ns)
    att = attachment(links, tmp_path / "state", host, mac, "net1")
    assert in_use([att]) == ""  # not pinned yet
    with process_in(pod_ns) as pid:
        out = run_hook(hook, pid, *attach_args(links, tmp_path, host), "--mac", mac)
        assert out.returncode == 0, out.stderr
        subprocess.run(["ip", "netns", "del", pod_ns], check=True)  # only the pod's process keeps it
        assert in_use([att]) == "interface net-x is in the network namespace of a running pod"
    assert in_use([att]) == ""  # the process is gone; the pin alone holds the namespace


def test_a_pod_namespace_full_of_links_costs_the_driver_a_bounded_read(
    links: Links, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod with NET_ADMIN can make links by the ten thousand; the driver lists a pod's links
    (health, unprepare) and must not read more than iplink.MAX_OUTPUT of it: the listing fails
    (its callers catch IpError). 200 veth pairs here, against a limit lowered to 32 KiB (the real
    one is 2 MiB, some thousands of links by a reviewer's sizes, not measured here)."""
    pod_ns = links.netns("c")
    batch = "".join(f"link add v{i} type veth peer name w{i}\n" for i in range(200))
    subprocess.run(["ip", "-n", pod_ns, "-batch", "-"], input=batch, text=True, check=True)
    assert len(iplink.links(f"/run/netns/{pod_ns}")) == 401  # lo and 400 veth ends
    monkeypatch.setattr(iplink, "MAX_OUTPUT", 32 << 10)
    with pytest.raises(iplink.IpError, match="more than 32768 bytes of output"):
        iplink.links(f"/run/netns/{pod_ns}")


def test_the_pods_addresses_in_the_claim_status_are_at_most_what_the_api_takes(
    links: Links, hook: Path, tmp_path: Path
) -> None:
    """The pod owns its interface once it is inside and may give it any number of addresses;
    the claim's status takes 16 (more would make every status write fail and be retried). The
    status writer records what it is asked to write: the API server is another test's."""
    from topodra.common import logs
    from topodra.common.device import Device
    from topodra.drivers.nic.pods import Held, PodWatch

    peer_ns, pod_ns = links.netns("p"), links.netns("c")
    host = links.name("h3")
    mac = links.veth(host, links.name("q3"), peer_ns)
    att = attachment(links, tmp_path / "state", host, mac, "net1")
    written: list[tuple[str, ...]] = []

    class Recorder:
        def set_devices(self, claim: object, devices: list[Any]) -> None:
            written.extend(d.network_data.ips for d in devices)

        def remove_devices(self, claim: object, keys: object) -> None:
            pass

    watch = PodWatch("/", 0.0, lambda: 0.0, logs.get("test"))
    watch.status = Recorder()  # type: ignore[assignment]
    with process_in(pod_ns) as pid:
        out = run_hook(hook, pid, *attach_args(links, tmp_path, host), "--mac", mac)
        assert out.returncode == 0, out.stderr
        batch = "".join(f"addr add 10.9.{i}.1/24 dev net1\n" for i in range(20))
        subprocess.run(["ip", "-n", pod_ns, "-batch", "-"], input=batch, text=True, check=True)
        watch.health(Held(ClaimRef("ns1", "c", "u1"), att, Device("net-x")))
    assert [len(ips) for ips in written] == [16]
    assert written[0][0] == "10.9.0.1/24"


def test_release_renames_an_interface_the_kernel_renamed(links: Links, tmp_path: Path) -> None:
    """A physical NIC returning from a dead namespace gets a kernel name when its own is taken;
    it is found under its PCI function (a veth and a folder tree stand in for both)."""
    peer_ns = links.netns("p")
    host, peer = links.name("h0"), links.name("q0")
    mac = links.veth(host, peer, peer_ns)
    subprocess.run(["ip", "link", "set", "dev", host, "name", links.name("k9")], check=True)
    root = pci_function(tmp_path, PCI, links.name("k9")).parent
    att = physical(attachment(links, tmp_path / "state", host, mac, "net1"))
    assert locate(att, str(root)).name == links.name("k9")
    assert release(att, str(root)) == f"renamed {links.name('k9')} back to {host}"
    assert host_link(host) is not None and host_link(links.name("k9")) is None


def test_release_sets_back_the_mac_the_nic_had_at_prepare(links: Links, tmp_path: Path) -> None:
    """A pod with NET_ADMIN set its NIC's MAC (to the uplink's, say) and the kernel gave the NIC
    back under its name when the pod's namespace died: unprepare sets the MAC it had at prepare,
    so the next claim of the NIC does not inherit the pod's (a veth and a folder tree stand in)."""
    peer_ns = links.netns("p")
    host = links.name("h0")
    mac = links.veth(host, links.name("q0"), peer_ns)
    subprocess.run(["ip", "link", "set", "dev", host, "address", "02:00:00:00:00:fe"], check=True)
    root = pci_function(tmp_path, PCI, host).parent
    att = physical(attachment(links, tmp_path / "state", host, mac, "net1"))
    assert locate(att, str(root)) == Where("host", host)
    assert release(att, str(root)) == f"already on the host; its MAC 02:00:00:00:00:fe set back to {mac}"
    assert host_link(host)["address"] == mac  # type: ignore[index]
    assert release(att, str(root)) == "already on the host"  # nothing left to do


@pytest.mark.parametrize("name", ["lo", "br-x"])
def test_under_a_synthetic_tree_a_device_of_this_host_is_never_given_the_nics_mac(
    links: Links, tmp_path: Path, name: str
) -> None:
    """A synthetic machine's NIC may share its name with one of this host's own devices or
    bridges (eth0): release must not set its MAC. Only veths, which the tests and the node tier
    make to stand in for the tree's NICs, are. Run in a namespace of its own, where lo (a device)
    and a bridge stand for the host's."""
    ns = links.netns("s")
    subprocess.run(["ip", "-n", ns, "link", "add", "br-x", "type", "bridge"], check=True)
    before = json.loads(subprocess.run(["ip", "-n", ns, "-j", "link", "show", name], capture_output=True,
                                       text=True, check=True).stdout)[0]["address"]  # fmt: skip
    root = tmp_path / "tree"
    (root / "sys/bus/pci/devices" / PCI / "net" / name).mkdir(parents=True)
    att = physical(attachment(links, tmp_path / "state", name, "02:00:00:00:00:77", "net1"))
    script = (
        "import json, sys; from topodra.drivers.nic.attach import Attachment, release; "
        "print(release(Attachment.from_json(json.loads(sys.argv[1])), sys.argv[2]))"
    )
    out = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-c", script, json.dumps(att.to_json()), str(root)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "already on the host"
    after = json.loads(subprocess.run(["ip", "-n", ns, "-j", "link", "show", name], capture_output=True,
                                      text=True, check=True).stdout)[0]["address"]  # fmt: skip
    assert after == before


def test_unprepare_finds_a_port_by_the_address_it_was_made_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port whose MAC a pod changed comes home from the dead namespace under a kernel name:
    among its function's two ports it is the one made with the claim's MAC. No device here has
    a permanent address (veths and ifbs get random ones; no dummy or netdevsim module), so the
    host's links are given as `ip -d -j link` reads them."""
    mac = "0c:42:a1:00:00:01"
    sibling = iplink.Link("a0", 3, "0c:42:a1:00:00:02", "down", (), None, ("pci", PCI))
    ours = iplink.Link("eth7", 4, "02:00:00:00:00:fe", "down", (), None, ("pci", PCI), perm_mac=mac)
    monkeypatch.setattr(iplink, "links", lambda netns=None: [sibling, ours])
    for link in (sibling, ours):
        folder = tmp_path / "sys/bus/pci/devices" / PCI / "net" / link.name
        folder.mkdir(parents=True)
        (folder / "address").write_text(f"{link.mac}\n")
    att = Attachment("pci-0000-04-00-0", "nic", "node-a", "ens1f0", "net1", mac, PCI, virtual=False,
                     mode="hook", pin=str(tmp_path / "none"))  # fmt: skip
    assert locate(att, str(tmp_path)) == Where("host", "eth7")  # not the sibling the tree lists first


def serve_links(monkeypatch: pytest.MonkeyPatch, *links: iplink.Link) -> None:
    """The host's netlink, as `ip` answers for all its links and for one by name."""
    monkeypatch.setattr(iplink, "links", lambda netns=None: list(links))
    monkeypatch.setattr(iplink, "link", lambda name: next((x for x in links if x.name == name), None))


def host_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *links: iplink.Link) -> str:
    """A folder tree standing in for the sysfs of a host with a two-port NIC at PCI: the host's
    netlink shows `links` (no device here has a permanent address, and no PCI NIC can be moved),
    sysfs lists them under the function and says which carry the address they were made with
    (addr_assign_type 0: a link given no perm_mac whose MAC ends in 0, here)."""
    for link in links:
        (tmp_path / "sys/bus/pci/devices" / PCI / "net" / link.name).mkdir(parents=True)
        cls = tmp_path / "sys/class/net" / link.name
        cls.mkdir(parents=True)
        own = link.perm_mac is None and (link.mac or "").endswith("0")
        (cls / "addr_assign_type").write_text("0\n" if own else "3\n")
    serve_links(monkeypatch, *links)
    monkeypatch.setattr(hostfiles, "is_this_host", lambda root: True)
    monkeypatch.setattr(iplink, "parents_reported", lambda: True)
    return str(tmp_path)


B_MAC, A_MAC = "0c:42:a1:00:00:20", "0c:42:a1:00:00:10"  # the two ports' own addresses


def b_attachment(**changes: Any) -> Attachment:
    att = Attachment("pci-0000-04-00-0", "nic", "node-a", "ens1f1", "net1", B_MAC, PCI, virtual=False,
                     mode="hook", pin="/nonexistent/pin", perm_mac=B_MAC)  # fmt: skip
    return dataclasses.replace(att, **changes)


def test_unprepare_never_takes_a_sibling_port_a_pod_renamed_and_re_maced_as_the_claims(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ports of one function, each in a pod. Pod A names its port as B's port is named on
    the host and gives it B's MAC; its namespace dies and the kernel gives the port back under
    that name. B's unprepare must not take it for B's port (and set B's MAC on it): prepare
    recorded what B's port was made with, and this one was made with another."""
    intruder = iplink.Link("ens1f1", 4, B_MAC, "down", (), None, ("pci", PCI), perm_mac=A_MAC)
    root = host_tree(tmp_path, monkeypatch, intruder)
    b = b_attachment()
    assert Attachment.from_json(b.to_json()) == b
    assert locate(b, root) == Where("gone")  # unprepare fails and is retried; B's port is in its pin
    # a checkpoint of an older driver did not record it: the MAC is all there is, as before
    assert locate(dataclasses.replace(b, perm_mac=None), root) == Where("host", "ens1f1")
    # in a pod's namespace the same: the port made with another address is not the claim's
    devices = frozenset({("pci", PCI)})
    ours = iplink.Link("eth9", 5, "02:00:00:00:00:07", "up", ("UP",), None, ("pci", PCI), perm_mac=B_MAC)
    copy_of_ours = dataclasses.replace(intruder, name="net1", ifindex=2)
    assert in_pod(b, [copy_of_ours, ours], devices) is ours


def test_unprepare_never_takes_a_sibling_port_that_kept_its_own_mac(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with a sibling that kept its own MAC: `ip` shows no permaddr for it, but sysfs
    says its MAC is the one it was made with, which is not the claim's port's. Neither taken
    nor given B's MAC."""
    sibling = iplink.Link("ens1f1", 4, A_MAC, "down", (), None, ("pci", PCI))
    root = host_tree(tmp_path, monkeypatch, sibling)
    ran: list[list[str]] = []
    monkeypatch.setattr(iplink, "run", lambda args, netns=None, **kw: ran.append(list(args)) or "")
    assert locate(b_attachment(), root) == Where("gone")
    assert restore_mac(b_attachment(), root) == "" and ran == []


def test_prepare_records_what_the_port_was_made_with_only_where_it_is_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the answer that shows the port carries the claim's MAC, over the claim's function:
    its permaddr, else its MAC where sysfs says it is its own; nothing otherwise."""
    port = iplink.Link("ens1f1", 4, B_MAC, "up", ("UP",), None, ("pci", PCI))
    root = host_tree(tmp_path, monkeypatch, port)
    shown: dict[str, iplink.Link] = {"ens1f1": port}
    monkeypatch.setattr(iplink, "link", lambda name: shown.get(name))
    assert recorded_made_with(b_attachment(perm_mac=None), root) == B_MAC
    shown["ens1f1"] = dataclasses.replace(port, mac="02:00:00:00:00:0e", perm_mac=B_MAC)  # set by an admin
    assert recorded_made_with(b_attachment(perm_mac=None, mac="02:00:00:00:00:0e"), root) == B_MAC
    assert recorded_made_with(b_attachment(perm_mac=None, mac=A_MAC), root) is None  # not the MAC shown
    shown["ens1f1"] = dataclasses.replace(port, parent=("pci", "0000:99:00.0"))  # another device's link
    assert recorded_made_with(b_attachment(perm_mac=None), root) is None
    shown["ens1f1"] = dataclasses.replace(port, mac="02:00:00:00:00:0f")  # a random address
    (tmp_path / "sys/class/net/ens1f1/addr_assign_type").write_text("1\n")
    assert recorded_made_with(b_attachment(perm_mac=None, mac="02:00:00:00:00:0f"), root) is None


def test_a_mac_is_set_back_only_on_a_link_the_kernel_shows_on_the_claims_function(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by its name alone (a virtio-net NIC has no net/ folder to look in), the interface
    may be another the pod renamed: where the kernel names devices, the MAC is set back only on
    a link over the claim's function. The host's links are given as `ip` shows them on such a
    machine (no PCI NIC here can be moved)."""
    att = Attachment("pci-0000-04-00-0", "nic", "node-a", "ens5", "net1", "52:54:00:00:00:05", PCI,
                     virtual=False, mode="hook", pin="/nonexistent/pin")  # fmt: skip
    other = iplink.Link("ens5", 7, "02:00:00:00:00:07", "down", (), None, ("virtio", "virtio9"))
    ran: list[list[str]] = []
    serve_links(monkeypatch, other)
    monkeypatch.setattr(iplink, "parents_reported", lambda: True)
    monkeypatch.setattr(
        iplink, "function_devices", lambda root, a: frozenset({("pci", PCI), ("virtio", "virtio2")})
    )
    monkeypatch.setattr(iplink, "run", lambda args, netns=None, **kw: ran.append(list(args)) or "")
    assert restore_mac(att, "/") == "" and ran == []
    ours = dataclasses.replace(other, parent=("virtio", "virtio2"))
    serve_links(monkeypatch, ours)
    assert restore_mac(att, "/") == f"; its MAC 02:00:00:00:00:07 set back to {att.mac}"
    assert ran == [["link", "set", "dev", "ens5", "address", att.mac]]


def test_the_address_a_link_was_made_with_is_read_from_ip(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ip -j link` names it "permaddr", only where it differs from the address (iproute2 6.1)."""
    out = json.dumps([
        {"ifindex": 4, "ifname": "eth7", "flags": [], "operstate": "DOWN", "address": "02:00:00:00:00:FE",
         "permaddr": "0C:42:A1:00:00:01", "parentbus": "pci", "parentdev": PCI},
        {"ifindex": 3, "ifname": "a0", "flags": [], "operstate": "DOWN", "address": "0c:42:a1:00:00:02"},
    ])  # fmt: skip
    monkeypatch.setattr(iplink, "run", lambda args, netns=None, **kw: out)
    assert [(link.mac, link.perm_mac) for link in iplink.links()] == [
        ("02:00:00:00:00:fe", "0c:42:a1:00:00:01"),
        ("0c:42:a1:00:00:02", None),
    ]


def test_one_link_is_read_by_name(links: Links) -> None:
    """What prepare asks about the NIC it hands out (iplink.link): its MAC, and no permaddr on a
    veth, whose address is random; nothing for a name no link has."""
    host = links.name("h3")
    mac = links.veth(host, links.name("q3"), links.netns("p"))
    link = iplink.link(host)
    assert link is not None and (link.name, link.mac, link.perm_mac, link.kind) == (host, mac, None, "veth")
    assert iplink.link(links.name("nx")) is None


def test_release_refuses_to_take_a_name_another_interface_holds(links: Links, tmp_path: Path) -> None:
    peer_ns = links.netns("p")
    host, peer = links.name("h0"), links.name("q0")
    mac = links.veth(host, peer, peer_ns)
    subprocess.run(["ip", "link", "set", "dev", host, "name", links.name("k9")], check=True)
    links.veth(host, links.name("q1"), peer_ns)  # somebody else now holds the original name
    root = pci_function(tmp_path, PCI, links.name("k9")).parent
    att = physical(attachment(links, tmp_path / "state", host, mac, "net1"))
    with pytest.raises(ReleaseError, match="taken by another interface"):
        release(att, str(root))
    assert host_link(links.name("k9")) is not None  # left where it was, nothing lost


def test_virtual_interface_whose_namespace_died_unpinned_is_reported_gone(
    links: Links, tmp_path: Path
) -> None:
    pod_ns = links.netns("c")
    host, peer = links.name("h0"), links.name("q0")
    mac = links.veth(host, peer)  # both ends on the host
    iplink.move_into(host, pod_ns, "net1")  # moved without a pin
    subprocess.run(["ip", "netns", "del", pod_ns], check=True)
    att = attachment(links, tmp_path / "state", host, mac, "net1")
    assert release(att) == "gone with the pod's namespace (virtual interface)"


def test_physical_interface_not_found_is_kept_for_a_retry(tmp_path: Path, links: Links) -> None:
    att = Attachment(
        device="pci-0000-ff-1f-7",
        request="nic",
        pool="node-a",
        host_name=links.name("zz"),
        container_name="net1",
        mac="02:00:00:00:00:99",
        pci_address="0000:ff:1f.7",
        virtual=False,
        mode="hook",
        pin=str(tmp_path / "netns" / "none"),
    )
    with pytest.raises(ReleaseError, match="will retry"):
        release(att, settle=0.3)


def test_hook_leaves_the_interface_on_the_host_when_the_name_is_taken_inside(
    links: Links, hook: Path, tmp_path: Path
) -> None:
    peer_ns, pod_ns = links.netns("p"), links.netns("c")
    host, peer = links.name("h0"), links.name("q0")
    mac = links.veth(host, peer, peer_ns)
    links.veth(links.name("h1"), links.name("q1"), peer_ns)
    subprocess.run(
        ["ip", "link", "set", "dev", links.name("h1"), "netns", pod_ns, "name", "net1"], check=True
    )
    state = tmp_path / "state"
    links.track_mount(str(state / "netns" / "c1_dev"))
    with process_in(pod_ns) as pid:
        out = run_hook(
            hook, pid, "attach", "--state-dir", str(state), "--pin", "c1_dev",
            "--host-name", host, "--name", "net1", "--mac", mac,
        )  # fmt: skip
    assert out.returncode != 0
    assert "already has an interface named net1" in out.stderr
    link = host_link(host)
    assert link is not None and link["address"] == mac


def test_hook_does_not_pull_a_port_out_of_its_bridge(links: Links, hook: Path, tmp_path: Path) -> None:
    """The driver withholds bridge ports; the hook checks again when it moves (the host may have
    enslaved the interface after prepare). Real bridge; the port stays on the host, in it."""
    peer_ns, pod_ns = links.netns("p"), links.netns("c")
    host, peer, br = links.name("h0"), links.name("q0"), links.name("b0")
    mac = links.veth(host, peer, peer_ns)
    links.bridge(br)
    subprocess.run(["ip", "link", "set", host, "master", br], check=True)
    args = attach_args(links, tmp_path, host)
    with process_in(pod_ns) as pid:
        out = run_hook(hook, pid, *args, "--mac", mac)
        assert out.returncode != 0
        assert f"interface {host} is a port of {br}: not moved" in out.stderr
        link = host_link(host)
        assert link is not None and link.get("master") == br
        assert "net1" not in netns_links(pod_ns)
        # the operator allowed it (--nic-allow-stacked): moved, and so out of the bridge
        out = run_hook(hook, pid, *args, "--mac", mac, "--allow-stacked")
        assert out.returncode == 0, out.stderr
        assert netns_links(pod_ns)["net1"]["address"] == mac
        assert host_link(host) is None
        assert not list(Path(f"/sys/class/net/{br}/brif").iterdir())  # the bridge lost its port
        assert "master" not in netns_links(pod_ns)["net1"]


def test_hook_does_not_move_the_parent_of_a_macvlan(links: Links, hook: Path, tmp_path: Path) -> None:
    """The reason the NIC README gives for withholding a macvlan's parent, on this kernel: moved
    into a pod, the parent takes nothing with it and the host's macvlan stays on the host riding
    a link the pod now controls. The hook refuses the move; with --allow-stacked it moves, and
    the macvlan is seen left behind on a link of the pod's namespace. Real veth and macvlan."""
    peer_ns, pod_ns = links.netns("p"), links.netns("c")
    parent, macvlan = links.name("h0"), links.name("m0")
    mac = links.veth(parent, links.name("q0"), peer_ns)
    subprocess.run(["ip", "link", "add", "link", parent, "name", macvlan, "type", "macvlan"], check=True)
    links.links.append(macvlan)
    args = attach_args(links, tmp_path, parent)
    with process_in(pod_ns) as pid:
        out = run_hook(hook, pid, *args, "--mac", mac)
        assert out.returncode != 0
        assert f"interface {parent} carries {macvlan}: not moved" in out.stderr
        assert host_link(parent) is not None and "net1" not in netns_links(pod_ns)
        out = run_hook(hook, pid, *args, "--mac", mac, "--allow-stacked")
        assert out.returncode == 0, out.stderr
        assert host_link(parent) is None and netns_links(pod_ns)["net1"]["address"] == mac
        left = host_link(macvlan)
        assert left is not None  # still on the host
        listed = subprocess.run(["ip", "-j", "netns", "list-id"], capture_output=True, text=True, check=True)
        ids = json.loads(listed.stdout)
        assert {"nsid": left["link_netnsid"], "name": pod_ns} in ids  # riding a link of the pod's


def test_hook_finds_a_physical_interface_by_its_pci_address(links: Links, hook: Path, tmp_path: Path) -> None:
    """The kernel renames a physical NIC that comes back from a dead namespace when its name is
    taken; without a MAC to go by, the hook finds it under its PCI function. No PCI NIC can be
    moved on this machine, so a veth stands in and a folder tree stands in for the host's
    /sys/bus/pci (TOPODRA_HOOK_SYSFS, a seam only tests set)."""
    peer_ns, pod_ns = links.netns("p"), links.netns("c")
    now, peer = links.name("h7"), links.name("q7")
    mac = links.veth(now, peer, peer_ns)
    sysfs = pci_function(tmp_path, PCI, now)
    args = attach_args(links, tmp_path, links.name("old"))
    with process_in(pod_ns) as pid:
        seam = {"TOPODRA_HOOK_SYSFS": str(sysfs)}
        out = run_hook(hook, pid, *args, "--pci", PCI, env=seam)
        assert out.returncode == 0, out.stderr
    assert netns_links(pod_ns)["net1"]["address"] == mac


def test_hook_moves_the_netdev_its_mac_names_when_the_function_has_two(
    links: Links, hook: Path, tmp_path: Path
) -> None:
    """A function with two netdevs (two ports of one function, as mlx4 has): the MAC says which
    one the claim holds, whatever the order of the function's net/ folder."""
    peer_ns, pod_ns = links.netns("p"), links.netns("c")
    first, second = links.name("a7"), links.name("b7")
    links.veth(first, links.name("q7"), peer_ns)
    mac = links.veth(second, links.name("r7"), peer_ns)
    pci = "0000:04:00.0"
    sysfs = pci_function(tmp_path, pci, first, second)
    args = attach_args(links, tmp_path, links.name("old"))
    with process_in(pod_ns) as pid:
        seam = {"TOPODRA_HOOK_SYSFS": str(sysfs)}
        out = run_hook(hook, pid, *args, "--mac", mac, "--pci", pci, env=seam)
        assert out.returncode == 0, out.stderr
    assert netns_links(pod_ns)["net1"]["address"] == mac
    assert host_link(first) is not None  # the other port stayed on the host


def test_hook_does_not_take_another_interface_with_the_nics_mac_for_the_nic(
    links: Links, hook: Path, tmp_path: Path
) -> None:
    """A bond takes its first port's MAC, and a bridge, a VLAN or any interface can carry a
    NIC's MAC too; one made before the NIC comes first in the host's link list. The hook takes
    the netdev of the claim's PCI function, never another interface with the same MAC. A veth
    stands in for the other one: unlike a bridge it could be moved, and so handed out."""
    peer_ns, pod_ns = links.netns("p"), links.netns("c")
    other, nic = links.name("d8"), links.name("h8")
    links.veth(other, links.name("p8"), peer_ns)  # the lower ifindex
    mac = links.veth(nic, links.name("q8"), peer_ns)
    subprocess.run(["ip", "link", "set", "dev", other, "address", mac], check=True)
    pci = "0000:04:00.0"
    sysfs = pci_function(tmp_path, pci, nic)
    args = attach_args(links, tmp_path, nic)
    with process_in(pod_ns) as pid:
        seam = {"TOPODRA_HOOK_SYSFS": str(sysfs)}
        out = run_hook(hook, pid, *args, "--mac", mac, "--pci", pci, env=seam)
        assert out.returncode == 0, out.stderr
    assert "net1" in netns_links(pod_ns)
    assert host_link(nic) is None
    assert host_link(other) is not None  # the other interface stayed on the host


def test_release_finds_the_port_its_mac_names_when_another_interface_shares_the_mac(
    links: Links, tmp_path: Path
) -> None:
    """Unprepare looks for the claim's netdev as the hook does: among its PCI function's netdevs
    by MAC, not the first host interface with that MAC (then the function's first port)."""
    peer_ns = links.netns("p")
    other, first, second = links.name("d9"), links.name("a9"), links.name("b9")
    links.veth(other, links.name("p9"), peer_ns)  # the lower ifindex
    links.veth(first, links.name("q9"), peer_ns)
    mac = links.veth(second, links.name("r9"), peer_ns)
    subprocess.run(["ip", "link", "set", "dev", other, "address", mac], check=True)
    root = pci_function(tmp_path, PCI, first, second).parent  # locate reads ROOT/sys/bus/pci
    att = physical(attachment(links, tmp_path / "state", second, mac, "net1"))
    assert locate(att, str(root)) == Where("host", second)


def test_release_never_renames_a_sibling_port_while_the_claims_port_is_in_the_pin(
    links: Links, hook: Path, tmp_path: Path
) -> None:
    """A function with two ports, the claim's in the pod: unprepare takes the one in the pin by
    its MAC, and when the pod changes the MAC and the name it never takes the sibling on the host
    (on this synthetic tree the tree's own word is left, elsewhere "gone")."""
    peer_ns, pod_ns = links.netns("p"), links.netns("c")
    first, second = links.name("a8"), links.name("b8")
    links.veth(first, links.name("q8"), peer_ns)
    mac = links.veth(second, links.name("r8"), peer_ns)
    root = pci_function(tmp_path, PCI, first, second).parent
    att = physical(attachment(links, tmp_path / "state", second, mac, "net1"))
    with process_in(pod_ns) as pid:
        seam = {"TOPODRA_HOOK_SYSFS": str(root / "sys")}
        out = run_hook(hook, pid, *attach_args(links, tmp_path, second), "--mac", mac, "--pci", PCI, env=seam)
        assert out.returncode == 0, out.stderr
        assert locate(att, str(root)) == Where("pinned", "net1")
        ip = ["ip", "-n", pod_ns, "link", "set", "dev"]
        subprocess.run([*ip, "net1", "address", "02:00:00:00:00:01"], check=True)
        assert locate(att, str(root)).name != first  # the MAC lookup fails: never the sibling
        subprocess.run([*ip, "net1", "name", "x9"], check=True)
        assert locate(att, str(root)).name != first


def test_hook_never_moves_a_sibling_port_for_the_claims(links: Links, hook: Path, tmp_path: Path) -> None:
    """The claim's port is not on the host (in an older pin, or gone) and its MAC is none of
    the function's netdevs': the other port is another claim's to have, and stays."""
    peer_ns, pod_ns = links.netns("p"), links.netns("c")
    sibling = links.name("a6")
    links.veth(sibling, links.name("q6"), peer_ns)
    sysfs = pci_function(tmp_path, PCI, sibling)
    with process_in(pod_ns) as pid:
        args = attach_args(links, tmp_path, links.name("b6"))  # the claim's port, not here
        out = run_hook(
            hook,
            pid,
            *args,
            "--mac",
            "02:00:00:00:00:06",
            "--pci",
            PCI,
            env={"TOPODRA_HOOK_SYSFS": str(sysfs)},
        )
        assert out.returncode != 0 and "is not on the host" in out.stderr
    assert host_link(sibling) is not None


def test_a_nic_whose_netdev_hangs_below_its_function_is_found_by_name(links: Links, tmp_path: Path) -> None:
    """virtio-net: the netdev sits on virtioN below the PCI function (no net/ folder on the
    function itself), so the function's netdev list is empty; on the host the NIC is looked for
    by its name, as the kernel does not rename it."""
    host = links.name("v7")
    mac = links.veth(host, links.name("w7"), links.netns("p"))
    root = tmp_path / "machine"
    (root / "sys/bus/pci/devices" / PCI / "virtio2" / "net" / host).mkdir(parents=True)
    att = physical(attachment(links, tmp_path / "state", host, mac, "net1"))
    assert locate(att, str(root)) == Where("host", host)


def pci_function(tmp_path: Path, pci: str, *netdevs: str) -> Path:
    """A folder tree standing in for the host's /sys with one PCI function holding `netdevs`,
    each with its MAC as the kernel shows it."""
    sysfs = tmp_path / "sys"
    for n in netdevs:
        folder = sysfs / "bus/pci/devices" / pci / "net" / n
        folder.mkdir(parents=True)
        (folder / "address").write_text(Path(f"/sys/class/net/{n}/address").read_text())
    return sysfs


def test_hook_follows_the_interface_into_a_recreated_sandbox(
    links: Links, hook: Path, tmp_path: Path
) -> None:
    """The pod's sandbox is re-created: the interface is still in the old (pinned) namespace."""
    peer_ns, first, second = links.netns("p"), links.netns("c"), links.netns("d")
    host, peer = links.name("h0"), links.name("q0")
    mac = links.veth(host, peer, peer_ns)
    state = tmp_path / "state"
    att = attachment(links, state, host, mac, "net1")
    args = [
        "attach",
        "--state-dir",
        str(state),
        "--pin",
        "c1_dev",
        "--host-name",
        host,
        "--name",
        "net1",
        "--mac",
        mac,
    ]
    with process_in(first) as pid:
        assert run_hook(hook, pid, *args).returncode == 0
    subprocess.run(["ip", "netns", "del", first], check=True)
    with process_in(second) as pid:
        out = run_hook(hook, pid, *args)
        assert out.returncode == 0, out.stderr
        assert "previous pinned namespace" in out.stderr
        assert netns_links(second)["net1"]["address"] == mac
    assert release(att) == f"moved back from the pinned namespace as {host}"
    assert host_link(host) is not None


def test_hook_rejects_bad_input(hook: Path, tmp_path: Path) -> None:
    out = subprocess.run(
        [
            "/bin/sh",
            str(hook),
            "attach",
            "--state-dir",
            str(tmp_path),
            "--pin",
            "../x",
            "--host-name",
            "a",
            "--name",
            "b",
        ],
        input='{"pid": 1}',
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode != 0 and "--pin must be a plain file name" in out.stderr
    out = subprocess.run(
        ["/bin/sh", str(hook), "pin", "--state-dir", str(tmp_path), "--pin", "p"],
        input='{"status": "creating"}',
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode != 0 and "no pid" in out.stderr


def test_hook_runs_under_a_minimal_posix_shell(hook: Path, links: Links, tmp_path: Path) -> None:
    """The host may have only busybox or dash: run the hook with busybox sh (no bashisms)."""
    busybox = Path("/bin/busybox")
    if not busybox.exists():
        pytest.skip("busybox is not installed")
    peer_ns, pod_ns = links.netns("p"), links.netns("c")
    host, peer = links.name("h0"), links.name("q0")
    mac = links.veth(host, peer, peer_ns)
    state = tmp_path / "state"
    att = attachment(links, state, host, mac, "eth7")
    with process_in(pod_ns) as pid:
        out = subprocess.run(
            [str(busybox), "sh", str(hook), "attach", "--state-dir", str(state), "--pin", "c1_dev",
             "--host-name", host, "--name", "eth7", "--mac", mac],
            input=json.dumps({"pid": pid}), capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert "eth7" in netns_links(pod_ns)
    assert release(att).startswith("moved back")
