"""Where an allocated interface is, and how it goes back to the host (unprepare).

Prepare only writes down what the pod will get (`Attachment`, kept in the claim's checkpoint
state); the move itself happens at container creation, by the hook or by the runtime (CDI
netDevices). Unprepare must then find the interface wherever it is and put it back under its
original name, and must be safe to repeat:

1. on the host already (never moved, moved back, or a physical NIC the kernel returned when the
   pod's namespace died, possibly renamed): found among its PCI function's netdevs (by MAC among
   them, or the MAC it was made with), a virtual interface by its name, never by MAC across the
   host; renamed back, and a NIC given back the MAC it had at prepare;
2. in the pinned namespace (the hook bind-mounted it, so it outlives the container): moved out
   and renamed in one request;
3. nowhere: a virtual interface whose namespace died unpinned is gone for good (veths die with
   their namespace; nothing to give back). A physical one is in transit (namespace teardown is
   asynchronous): unprepare fails and the kubelet retries, state kept, so it is never lost.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from topodra.common import logs
from topodra.common.hostnet import iplink
from topodra.common.topology import hostfiles

_log = logs.get("topodra.nic.attach")


@dataclass(frozen=True, slots=True)
class Attachment:
    """One NIC of a prepared claim, as the checkpoint keeps it."""

    device: str  # DRA device name
    request: str
    pool: str
    host_name: str  # the interface's name on the host before prepare
    container_name: str
    mac: str | None
    pci_address: str | None
    virtual: bool
    mode: str  # hook | cdi | none (admin access: nothing moved)
    pin: str  # pinned-namespace file (may not exist)
    share_id: str | None = None
    ips: tuple[str, ...] = ()
    link_up: bool = True
    # the address the port was made with, where prepare could tell (recorded_made_with); None
    # where it could not (no permanent address, a virtual interface, a synthetic machine, a
    # checkpoint of an older driver): then nothing is checked against it
    perm_mac: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ips"] = list(self.ips)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Attachment:
        return cls(
            device=str(data["device"]),
            request=str(data.get("request", "")),
            pool=str(data.get("pool", "")),
            host_name=str(data["host_name"]),
            container_name=str(data["container_name"]),
            mac=data.get("mac"),
            pci_address=data.get("pci_address"),
            virtual=bool(data.get("virtual", False)),
            mode=str(data.get("mode", "hook")),
            pin=str(data["pin"]),
            share_id=data.get("share_id"),
            ips=tuple(data.get("ips") or ()),
            link_up=bool(data.get("link_up", True)),
            perm_mac=data.get("perm_mac"),
        )


class ReleaseError(RuntimeError):
    """The interface could not be given back yet; the claim stays prepared and is retried."""


@dataclass(frozen=True, slots=True)
class Where:
    place: str  # host | pinned | gone
    name: str | None = None


def _usable_mac(mac: str | None) -> str | None:
    return mac if mac and mac != "00:00:00:00:00:00" else None


def _made_with(att: Attachment) -> str | None:
    """The address the claim's port was made with, where prepare could tell."""
    return att.perm_mac.lower() if att.perm_mac else None


def _foreign(link: iplink.Link, att: Attachment, sysfs_root: str | None = None) -> bool:
    """The link was made with another address than the claim's port: another port, whatever
    MAC and name a pod gave it. `sysfs_root`: for a link of the host's namespace, whose sysfs
    tells more where it is the host's own (iplink.made_with); None in a pod's namespace."""
    ours = _made_with(att)
    if ours is None:
        return False
    host_sysfs = sysfs_root if sysfs_root is not None and hostfiles.is_this_host(sysfs_root) else None
    theirs = iplink.made_with(link, host_sysfs)
    return theirs is not None and theirs != ours


def _on_its_function(att: Attachment, link: iplink.Link, sysfs_root: str) -> bool:
    """Where the kernel names the device under a netdev, it is the claim's PCI function or one
    below it (parent_devices); elsewhere nothing says otherwise."""
    devices = parent_devices(att, sysfs_root)
    return devices is None or link.parent in devices


def recorded_made_with(att: Attachment, sysfs_root: str) -> str | None:
    """What prepare records as `perm_mac`: the address the NIC's port was made with, read from
    the same answer that shows the port now carries the MAC the claim was given, and over the
    claim's PCI function where the kernel names devices. None where that is not all shown."""
    mac = _usable_mac(att.mac)
    if not mac or not att.pci_address or att.virtual or not hostfiles.is_this_host(sysfs_root):
        return None
    link = iplink.link(att.host_name)
    if link is None or link.mac != mac.lower() or not _on_its_function(att, link, sysfs_root):
        return None
    return iplink.made_with(link, sysfs_root)


def locate(att: Attachment, sysfs_root: str = "/") -> Where:
    """Find the interface: host first (it may already be back), then the pin.

    Never by MAC across the host: a bond, bridge or VLAN of the host can carry the NIC's MAC
    too, and a pod can give the NIC any MAC (the uplink's), which it keeps when it comes home
    until unprepare sets it back; what is found here is set down and renamed."""
    mac = _usable_mac(att.mac)
    host_links = iplink.links()
    listed = iplink.pci_netdevs(sysfs_root, att.pci_address) if att.pci_address else None
    if listed is not None:
        # sysfs names the function's netdevs, netlink must show them too: a sysfs root that is
        # not the host's own (--sysfs-root at a synthetic or captured machine) keeps naming an
        # interface that has moved into a pod, and trusting it would drop the pin holding it.
        mine = [link for link in host_links if link.name in listed and not _foreign(link, att, sysfs_root)]
        link = _with_mac(mine, _made_with(att) or mac) if mac else None
        link = link or iplink.find(mine, name=att.host_name)
        if link is not None:
            return Where("host", link.name)
        if not mac and len(mine) == 1:
            # renamed by the kernel, and nothing else to go by; with a MAC that is no longer
            # there, a lone netdev may be a sibling port (sysfs hides the claim's while it is in
            # a pod or on its way back): the pin is asked, else "gone", and unprepare is retried
            return Where("host", mine[0].name)
    elif iplink.find(host_links, name=att.host_name) is not None:
        # A virtual interface comes home under its name or not at all (the kernel renames only
        # devices it hands back from a dead namespace); so does a NIC whose netdev hangs on a
        # device below its function (virtio-net), which the kernel does not rename either.
        return Where("host", att.host_name)
    if iplink.is_pinned_netns(att.pin):
        link = in_pod(att, iplink.links(att.pin), parent_devices(att, sysfs_root))
        if link is not None:
            return Where("pinned", link.name)
    if listed and not hostfiles.is_this_host(sysfs_root):
        # Not in netlink and not in the pin, under a sysfs root that is not the host's own (a
        # synthetic or captured machine, whose interfaces netlink never shows): that tree is the
        # only witness left. On the host's own sysfs this stays "gone": netlink is the truth there.
        return Where("host", att.host_name if att.host_name in listed else listed[0])
    return Where("gone")


def _with_mac(links: Sequence[iplink.Link], mac: str) -> iplink.Link | None:
    """The link with this MAC, else the one made with it (a port whose MAC a pod changed, which
    the kernel gave back when the pod's namespace died)."""
    mac = mac.lower()
    return next((link for link in links if link.mac == mac), None) or next(
        (link for link in links if link.perm_mac == mac), None
    )


def in_pod(
    att: Attachment, inside: Sequence[iplink.Link], devices: frozenset[tuple[str, str]] | None
) -> iplink.Link | None:
    """The claim's interface among the links of a pod's namespace, where a pod with NET_ADMIN
    can make interfaces of its own, give them the NIC's MAC and name, and change the NIC's:
    what is taken from there goes to the host under the NIC's name. A PCI NIC is known by the
    device the kernel shows under its netdev (`devices`: its function's, see parent_devices),
    which no interface a pod makes has; among several (two ports of one function) the MAC,
    then the address the port was made with, then the name, tells them apart. Otherwise
    (`devices` None: a virtual interface, an older kernel) nothing is beyond a pod's reach: the
    MAC and the name together come first, then the MAC alone, or the name where there is no
    MAC."""
    mac = _usable_mac(att.mac)
    mac = mac.lower() if mac else None
    physical = devices is not None
    candidates = (
        [link for link in inside if link.parent in devices and not _foreign(link, att)]
        if devices is not None
        else inside
    )
    ranked = [[link for link in candidates if mac and link.mac == mac and link.name == att.container_name]]
    if mac:
        ranked.append([link for link in candidates if link.mac == mac])
    if physical and mac:  # the pod changed the MAC; the port's own address is still the one
        made_with = _made_with(att) or mac
        ranked.append([link for link in candidates if link.perm_mac == made_with])
    if physical or not mac:
        ranked.append([link for link in candidates if link.name == att.container_name])
    if physical and len(candidates) == 1:
        ranked.append(list(candidates))  # the pod changed both its MAC and its name
    return next((group[0] for group in ranked if group), None)


def parent_devices(att: Attachment, sysfs_root: str) -> frozenset[tuple[str, str]] | None:
    """The devices the kernel may name under the claim's netdev (iplink.function_devices), when
    they tell it apart: a PCI NIC, a kernel that reports parents (5.15+: some host interface
    shows one), and PCI addresses that are the host's own (under a --sysfs-root at a synthetic
    machine, veths without a device stand in for its NICs). None otherwise."""
    if not att.pci_address or not hostfiles.is_this_host(sysfs_root) or not iplink.parents_reported():
        return None
    return iplink.function_devices(sysfs_root, att.pci_address)


def release(
    att: Attachment,
    sysfs_root: str = "/",
    *,
    settle: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Put the interface back on the host under `host_name`; return what was done.

    Raises ReleaseError while a physical interface cannot be found (kept for a retry).
    """
    log = _log.bind(device=att.device, interface=att.host_name)
    if att.mode == "none":
        return "nothing was moved (admin access)"
    deadline = time.monotonic() + settle
    while True:
        where = locate(att, sysfs_root)
        if where.place != "gone" or att.virtual or time.monotonic() >= deadline:
            break
        sleep(0.2)  # a dying namespace hands physical devices back asynchronously
    if where.place == "pinned" and where.name is not None:
        if _name_taken(att.host_name, att.mac):
            raise ReleaseError(
                f"device {att.device}: cannot return {where.name} to the host as {att.host_name}: "
                "that name is taken by another interface"
            )
        try:
            iplink.move_to_host(where.name, att.pin, att.host_name)
        except iplink.IpError as e:
            raise ReleaseError(f"device {att.device}: cannot move {where.name} back to the host: {e}") from e
        log.info(f"moved {where.name} back from the pod's namespace as {att.host_name}")
        done = f"moved back from the pinned namespace as {att.host_name}"
    elif where.place == "host" and where.name is not None:
        if where.name != att.host_name:
            if _name_taken(att.host_name, att.mac):
                raise ReleaseError(
                    f"device {att.device}: interface is on the host as {where.name} but {att.host_name} "
                    "is taken by another interface"
                )
            try:
                iplink.rename(where.name, att.host_name)
            except iplink.IpError as e:
                raise ReleaseError(f"device {att.device}: cannot rename {where.name} back: {e}") from e
            log.info(f"renamed {where.name} back to {att.host_name}")
            done = f"renamed {where.name} back to {att.host_name}"
        else:
            done = "already on the host"
    elif att.virtual:
        log.warning(f"virtual interface {att.host_name} is gone (its namespace died unpinned)")
        done = "gone with the pod's namespace (virtual interface)"
    else:
        raise ReleaseError(
            f"device {att.device}: interface {att.host_name} (pci {att.pci_address}, mac {att.mac}) is "
            "neither on the host nor in the pinned namespace yet; will retry"
        )
    if where.place != "gone" and not att.virtual:
        done += restore_mac(att, sysfs_root)
    try:
        iplink.unpin(att.pin)
    except (OSError, iplink.IpError) as e:
        # the interface is home; a stale pin only keeps an empty namespace alive
        log.warning(f"cannot remove pin {att.pin}: {e}")
    return done


def restore_mac(att: Attachment, sysfs_root: str = "/") -> str:
    """Give the interface, home under its host name, back the MAC it had at prepare; what was
    done, for release's answer. A pod with NET_ADMIN may have set any MAC, the node uplink's
    included, and the next claim of the NIC would get it. Fails closed (ReleaseError: the claim
    stays prepared and is retried) rather than hand the NIC on with the pod's MAC. For a NIC
    only: a virtual interface comes home by its MAC or not at all, and one found by name may be
    another made since. Nothing is done to an interface that is not shown to be the claim's
    port: one netlink does not show (a synthetic machine's word), one made with another address
    (another port, named as the claim's), one the kernel shows on another device than the
    claim's function, or, under a synthetic machine's tree, anything but a veth (the stand-ins
    the tests and the node tier make; a name the tree shares with a device or bridge of this
    host, such as eth0, is no proof)."""
    mac = _usable_mac(att.mac)
    link = iplink.link(att.host_name) if mac else None
    if mac is None or link is None or link.mac is None or link.mac == mac.lower():
        return ""
    if not _shown_to_be_the_port(att, link, sysfs_root):
        return ""
    try:
        iplink.run(["link", "set", "dev", att.host_name, "address", mac])
    except iplink.IpError as e:
        raise ReleaseError(
            f"device {att.device}: {att.host_name} came back with MAC {link.mac}, and setting its "
            f"own {mac} back failed: {e}"
        ) from e
    _log.info(f"set the MAC of {att.host_name} back from {link.mac} to {mac}", device=att.device)
    return f"; its MAC {link.mac} set back to {mac}"


def _shown_to_be_the_port(att: Attachment, link: iplink.Link, sysfs_root: str) -> bool:
    """restore_mac's check: not made with another address, and over the claim's function;
    under a synthetic tree, a veth."""
    if _foreign(link, att, sysfs_root):
        return False
    if not hostfiles.is_this_host(sysfs_root):
        return link.kind == "veth"
    return _on_its_function(att, link, sysfs_root)


def _name_taken(name: str, mac: str | None) -> bool:
    link = iplink.find(iplink.links(), name=name)
    return link is not None and (mac is None or link.mac != mac.lower())


def in_use(atts: Sequence[Attachment]) -> str:
    """Which of these interfaces is in the pinned network namespace of a running pod (for the
    log), or "": a process lives in it. Seen only from the host's PID namespace (the DaemonSet's
    hostPID); elsewhere every namespace looks unused, so nothing is claimed."""
    pinned = [a for a in atts if iplink.is_pinned_netns(a.pin)]
    if not pinned or not iplink.sees_all_processes():
        return ""
    live = iplink.netns_in_use()
    for a in pinned:
        with contextlib.suppress(OSError):
            if os.stat(a.pin).st_ino in live:
                return f"interface {a.device} is in the network namespace of a running pod"
    return ""


# --- a pod's namespace that nobody uses any more -------------------------------------------------


def return_orphan(att: Attachment, in_use: set[int], sysfs_root: str = "/") -> str | None:
    """Bring the interface home when the pinned namespace has no process left (the pod died),
    while the claim stays prepared. None when there is nothing to do.

    The namespace is held open by a file descriptor while we look into it and move the link
    out, so a hook re-pinning the claim for a new sandbox at the same moment cannot make us
    take the interface out of the *new* pod; the pin is removed only if it still names the
    namespace we emptied.
    """
    try:
        fd = os.open(att.pin, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not iplink.is_pinned_netns(att.pin) or st.st_ino in in_use:
            return None
        ns = f"/proc/{os.getpid()}/fd/{fd}"
        link = in_pod(att, iplink.links(ns), parent_devices(att, sysfs_root))
        done = "the pod's namespace was empty"
        if link is not None:
            if _name_taken(att.host_name, att.mac):
                raise ReleaseError(
                    f"device {att.device}: cannot return {link.name} as {att.host_name}: the name is taken"
                )
            iplink.move_to_host(link.name, ns, att.host_name)
            done = f"moved {link.name} back to the host as {att.host_name}"
        with contextlib.suppress(OSError, iplink.IpError):
            if os.stat(att.pin).st_ino == st.st_ino:
                iplink.unpin(att.pin)
        return done
    finally:
        os.close(fd)
