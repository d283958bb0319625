"""Network-namespace operations through iproute2 and nsenter (the only side effects on links).

`ip` is what the hook uses on the host too, so the driver and the hook share one set of
semantics (and the same error texts). A pinned namespace is a file bind-mounted over
`/proc/<pid>/ns/net`; commands run inside it through `nsenter --net=<file>`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass

IP = "ip"
NSENTER = "nsenter"
TIMEOUT = 15.0
MAX_OUTPUT = 2 << 20  # bytes read of a command in a pod's namespace: 3000-4000 links of `ip -d -j link`


class IpError(RuntimeError):
    """An `ip`/`nsenter` command failed; the message has the command and its stderr."""


@dataclass(frozen=True, slots=True)
class Link:
    name: str
    ifindex: int
    mac: str | None
    operstate: str | None
    flags: tuple[str, ...]
    kind: str | None = None  # veth, bond, ... (None: a real device)
    # the device under the netdev as the kernel names it (5.15+, any namespace): ("pci",
    # "0000:3b:00.0") for a PCI function; nothing a pod can give an interface it makes itself
    parent: tuple[str, str] | None = None
    # the address the device was made with (IFLA_PERM_ADDRESS; `ip` shows it only where it
    # differs from `mac`): a NIC's own, which changing its MAC does not change
    perm_mac: str | None = None

    @property
    def up(self) -> bool:
        return "UP" in self.flags

    @property
    def carrier(self) -> bool:
        return "LOWER_UP" in self.flags


def _argv(args: Sequence[str], netns: str | None) -> list[str]:
    base = [IP, *args]
    return [NSENTER, f"--net={netns}", "--", *base] if netns else base


def run(args: Sequence[str], netns: str | None = None, *, limit: int | None = None) -> str:
    """`ip` with `args`, in `netns` when given; its output. A pod's namespace is the pod's to
    fill: a pod with NET_ADMIN can make links by the ten thousand, so what is read from one is
    bounded by MAX_OUTPUT (`limit`) and the command stopped past it. The host's own listing is
    not bounded: its size is the node's (its interfaces and the pods' host-side veths)."""
    argv = _argv(args, netns)
    if limit is None and netns is not None:
        limit = MAX_OUTPUT
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except OSError as e:
        raise IpError(f"{' '.join(argv)}: {e}") from e
    timed_out = threading.Event()

    def kill() -> None:  # the whole group: a child holding the pipes would keep the reads waiting
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)

    def stop() -> None:
        timed_out.set()
        kill()

    timer = threading.Timer(TIMEOUT, stop)
    timer.start()
    errors: list[bytes] = []
    drain = threading.Thread(target=lambda: errors.append(proc.stderr.read() if proc.stderr else b""))
    drain.start()
    try:
        assert proc.stdout is not None
        out = proc.stdout.read() if limit is None else proc.stdout.read(limit + 1)
        if limit is not None and len(out) > limit:
            kill()
            raise IpError(f"{' '.join(argv)}: more than {limit} bytes of output; not read")
        code = proc.wait()
    finally:
        if proc.poll() is None:
            kill()
        proc.wait()
        drain.join()
        timer.cancel()
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()
    if timed_out.is_set():
        raise IpError(f"{' '.join(argv)}: timed out after {TIMEOUT:g} s")
    if code != 0:
        err = b"".join(errors).decode(errors="replace").strip()
        raise IpError(f"{' '.join(argv)}: exit {code}: {err}")
    return out.decode(errors="replace")


def links(netns: str | None = None) -> list[Link]:
    return _parse(run(["-d", "-j", "link", "show"], netns))


def link(name: str) -> Link | None:
    """One link of our namespace by name; None when there is none (or `ip` cannot say)."""
    try:
        found = _parse(run(["-d", "-j", "link", "show", "dev", name]))
    except IpError:
        return None
    return found[0] if found else None


def made_with(link: Link, sysfs_root: str | None = None) -> str | None:
    """The address the link was made with, where that is known: the permaddr `ip` shows (only
    where it differs from the MAC), else, for a link of our own namespace whose sysfs (under
    `sysfs_root`, the host's) says its MAC is still the one it was made with (addr_assign_type
    0, NET_ADDR_PERM), its MAC. None for a random or changed address with no permaddr, and in a
    pod's namespace, whose sysfs we do not see."""
    if link.perm_mac:
        return link.perm_mac
    if sysfs_root is None or link.mac is None:
        return None
    try:
        with open(os.path.join(sysfs_root, "sys/class/net", link.name, "addr_assign_type")) as f:
            kind = f.read(16).strip()
    except OSError:
        return None
    return link.mac if kind == "0" else None


def _parse(out: str) -> list[Link]:
    data = json.loads(out or "[]")
    result = []
    for e in data:
        info = e.get("linkinfo") or {}
        mac, perm = e.get("address"), e.get("permaddr")
        result.append(
            Link(
                name=e["ifname"],
                ifindex=int(e["ifindex"]),
                mac=mac.lower() if isinstance(mac, str) else None,
                operstate=(e.get("operstate") or "").lower() or None,
                flags=tuple(e.get("flags") or ()),
                kind=info.get("info_kind"),
                parent=_parent(e),
                perm_mac=perm.lower() if isinstance(perm, str) else None,
            )
        )
    return result


def _parent(e: dict[str, object]) -> tuple[str, str] | None:
    bus, dev = e.get("parentbus"), e.get("parentdev")
    return (bus, dev) if isinstance(bus, str) and isinstance(dev, str) and bus and dev else None


def find(all_links: Sequence[Link], *, mac: str | None = None, name: str | None = None) -> Link | None:
    """By MAC when given (names change, MACs do not), else by name."""
    if mac:
        for link in all_links:
            if link.mac == mac.lower():
                return link
        return None
    for link in all_links:
        if link.name == name:
            return link
    return None


_PARENTS_SEEN = False


def parents_reported() -> bool:
    """The kernel names the device under a netdev (5.15+): some host interface shows one. A
    property of the running kernel, so once seen it is not asked again; until then every call
    looks (none may show one yet, with every NIC in a pod)."""
    global _PARENTS_SEEN
    if not _PARENTS_SEEN:
        _PARENTS_SEEN = any(link.parent is not None for link in links())
    return _PARENTS_SEEN


def function_devices(sysfs_root: str, address: str) -> frozenset[tuple[str, str]]:
    """What the kernel can name as a netdev's parent device (`Link.parent`) for a netdev of this
    PCI function: the function itself, and the devices below it (virtioN, auxiliary devices).
    None of these can be made by a pod."""
    out = {("pci", address)}
    folder = os.path.join(sysfs_root, "sys/bus/pci/devices", address)
    with contextlib.suppress(OSError):
        for child in os.listdir(folder):
            with contextlib.suppress(OSError):
                bus = os.path.basename(os.readlink(os.path.join(folder, child, "subsystem")))
                out.add((bus, child))
    return frozenset(out)


def pci_netdevs(sysfs_root: str, address: str) -> list[str] | None:
    """Netdev names of a PCI function in *our* namespace (sysfs hides other namespaces'); None
    when its netdevs do not hang on it directly (virtio-net: <function>/virtioN/net) or it is
    not there."""
    try:
        return sorted(os.listdir(os.path.join(sysfs_root, "sys/bus/pci/devices", address, "net")))
    except OSError:
        return None


def rename(name: str, new_name: str, netns: str | None = None) -> None:
    """A link must be down to be renamed; it is left down (prepare/unprepare decide about up)."""
    if name == new_name:
        return
    run(["link", "set", "dev", name, "down"], netns)
    run(["link", "set", "dev", name, "name", new_name], netns)


def move_to_host(name: str, netns: str, host_name: str) -> None:
    """Move `name` out of the pinned namespace into ours, renamed in the same netlink request
    (so a pod-side name such as eth0 never clashes with a host interface)."""
    run(["link", "set", "dev", name, "down"], netns)
    run(["link", "set", "dev", name, "netns", str(os.getpid()), "name", host_name], netns)


def move_into(name: str, target: str, new_name: str) -> None:
    """Move a host link into a namespace (`target`: a pid, or a name under /run/netns)."""
    run(["link", "set", "dev", name, "netns", target, "name", new_name])


def set_up(name: str, netns: str | None = None) -> None:
    run(["link", "set", "dev", name, "up"], netns)


def addresses(name: str, netns: str | None = None) -> list[str]:
    """Global and link-local addresses of a link as CIDR strings."""
    out = run(["-j", "addr", "show", "dev", name], netns)
    data = json.loads(out or "[]")
    result = []
    for e in data:
        for a in e.get("addr_info") or ():
            if "local" in a and "prefixlen" in a:
                result.append(f"{a['local']}/{a['prefixlen']}")
    return result


def is_pinned_netns(path: str) -> bool:
    """True when `path` is a bind mount of a network namespace (an nsfs inode), without forking.

    A pin that was never mounted (the hook did not run) or was unmounted is a plain file on the
    state folder's filesystem, which has a different device number.
    """
    try:
        st = os.stat(path)
        ours = os.stat("/proc/self/ns/net")
    except OSError:
        return False
    return st.st_dev == ours.st_dev


def unpin(path: str) -> None:
    """Unmount and remove a pin; absent or unmounted pins are fine."""
    if is_pinned_netns(path):
        done = subprocess.run(["umount", path], capture_output=True, text=True, timeout=TIMEOUT, check=False)
        if done.returncode != 0 and is_pinned_netns(path):
            raise IpError(f"umount {path}: {done.stderr.strip()}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


# --- which namespaces some process is in ---------------------------------------------------------


def sees_all_processes() -> bool:
    """True in the host's PID namespace. Kernel threads (pid 2, kthreadd) are visible only
    there; in a container without hostPID every pinned namespace would look unused."""
    try:
        with open("/proc/2/comm") as f:
            return f.read().strip() == "kthreadd"
    except OSError:
        return False


def netns_in_use() -> set[int]:
    """Inode numbers of the network namespaces some process is in (readlink only, no stat)."""
    out: set[int] = set()
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return out
    for pid in pids:
        try:
            link = os.readlink(f"/proc/{pid}/ns/net")  # "net:[4026531840]"
        except OSError:
            continue
        if link.startswith("net:[") and link.endswith("]"):
            out.add(int(link[5:-1]))
    return out
