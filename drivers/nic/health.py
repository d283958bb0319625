"""NIC health: a host interface's link as sysfs shows it now, a pod's interface as its pinned
network namespace shows it.

Unhealthy results carry the reason their taint names (`nic.topodra.io/unhealthy=<reason>`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from topodra.common.hostnet import iplink
from topodra.common.runtime.driver import DeviceHealth, Health
from topodra.common.topology.hostfiles import read_text
from topodra.drivers.nic.attach import Attachment, in_pod, parent_devices
from topodra.drivers.nic.devices import Nic, link_is_down

REMOVED = DeviceHealth(Health.UNHEALTHY, "device removed", "DeviceRemoved")


def _down(where: str, why: str) -> DeviceHealth:
    return DeviceHealth(
        Health.UNHEALTHY, f"{where}: {why}", "NoCarrier" if why == "no carrier" else "LinkDown"
    )


def live_link(sysfs_root: str, ifname: str) -> tuple[str | None, bool | None, bool | None]:
    """operstate, carrier and admin-up read now (the last scan may be seconds old)."""
    base = Path(sysfs_root, "sys/class/net", ifname)
    oper = read_text(base / "operstate")
    carrier_text = read_text(base / "carrier")
    carrier = None if carrier_text not in ("0", "1") else carrier_text == "1"
    flags = read_text(base / "flags")
    try:
        admin_up = None if flags is None else bool(int(flags, 16) & 0x1)  # IFF_UP
    except ValueError:
        admin_up = None
    return oper, carrier, admin_up


def pci_present(sysfs_root: str, address: str) -> bool:
    return os.path.exists(os.path.join(sysfs_root, "sys/bus/pci/devices", address))


def on_host(sysfs_root: str, nic: Nic) -> DeviceHealth:
    if nic.interface is None:
        if nic.driver == "vfio-pci":
            return DeviceHealth(Health.HEALTHY, "bound to vfio-pci (no network interface)")
        if nic.pci_address and not pci_present(sysfs_root, nic.pci_address):
            return REMOVED
        return DeviceHealth(
            Health.UNHEALTHY, f"no network interface (kernel driver {nic.driver or 'none'})", "NoInterface"
        )
    oper, carrier, admin_up = live_link(sysfs_root, nic.interface)
    if oper is None and carrier is None:
        oper, carrier = nic.operstate, nic.carrier
    if admin_up is False:
        # Spare NICs meant for pods are often left down on the host: the physical link
        # cannot be known without bringing it up, which is not ours to do.
        return DeviceHealth(Health.UNKNOWN, f"{nic.interface}: administratively down on the host")
    down = link_is_down(oper, carrier)
    if down is not None:
        return _down(nic.interface, down)
    if oper == "up" or carrier is True:
        return DeviceHealth(Health.HEALTHY, f"{nic.interface}: link up")
    return DeviceHealth(Health.UNKNOWN, f"{nic.interface}: operstate {oper or 'unknown'}")


class InPods:
    """The health of NICs inside pods, looked at once per `interval` each (it forks nsenter)."""

    def __init__(self, sysfs_root: str, interval: float, clock: Callable[[], float]) -> None:
        self._root = sysfs_root
        self._interval = interval
        self._clock = clock
        self._seen: dict[str, tuple[float, DeviceHealth, bool]] = {}

    def forget(self, device: str) -> None:
        self._seen.pop(device, None)

    def clear(self) -> None:
        self._seen.clear()

    def health(self, att: Attachment) -> tuple[DeviceHealth, bool]:
        """(health, whether the interface was found in the pod's namespace)."""
        if att.pci_address and not pci_present(self._root, att.pci_address):
            return REMOVED, False
        cached = self._seen.get(att.device)
        now = self._clock()
        if cached is not None and now - cached[0] < self._interval:
            return cached[1], cached[2]
        found = False
        result = DeviceHealth(Health.UNKNOWN, "in a pod; its namespace is not pinned")
        if iplink.is_pinned_netns(att.pin):
            try:
                inside = iplink.links(att.pin)
                devices = parent_devices(att, self._root)
                link = in_pod(att, inside, devices)
                if link is None and devices is None:  # a virtual interface whose MAC the pod changed
                    link = iplink.find(inside, name=att.container_name)
            except (iplink.IpError, ValueError) as e:
                result = DeviceHealth(Health.UNKNOWN, f"cannot look into the pod's namespace: {e}")
            else:
                if link is None:
                    result = DeviceHealth(Health.UNHEALTHY, "interface not found in the pod's namespace")
                else:
                    found = True
                    down = link_is_down(link.operstate, link.carrier)
                    if not link.up:
                        result = DeviceHealth(Health.UNKNOWN, f"{link.name} (in pod): administratively down")
                    elif down is not None:
                        result = _down(f"{link.name} (in pod)", down)
                    else:
                        result = DeviceHealth(Health.HEALTHY, f"{link.name} (in pod): link {link.operstate}")
        elif att.virtual:
            result = DeviceHealth(Health.UNHEALTHY, "interface gone from the host")
        self._seen[att.device] = (now, result, found)
        return result, found
