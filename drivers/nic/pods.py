"""NICs that claims hold: what their claim's status says, and interfaces whose pod died.

The driver records every handed-out NIC as `Held`. While the interface is in the pod, the
health checks look at it there (health.InPods); the first time it is found, the claim's
`status.devices` entry becomes Ready=Attached with the pod-side addresses. An interface whose
pod namespace has no process left is brought back to the host at once (the claim stays
prepared: a re-created sandbox gets it again from the hook), and its entry says so.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from topodra.common import logs
from topodra.common.device import Device
from topodra.common.hostnet import iplink
from topodra.common.runtime.driver import (
    AllocatedDeviceStatus,
    ClaimRef,
    ClaimStatusWriter,
    DeviceCondition,
    DeviceHealth,
    NetworkDeviceData,
)
from topodra.drivers.nic import attach, health
from topodra.drivers.nic.attach import Attachment, ReleaseError
from topodra.drivers.nic.config import MAX_IPS


@dataclass(slots=True)
class Held:
    """An allocated NIC: who holds it and what it looked like when last seen on the host."""

    claim: ClaimRef
    attachment: Attachment
    device: Device
    reported_attached: bool = False


def entry(
    att: Attachment, reason: str, message: str, ips: Sequence[str], ready: str = "True"
) -> AllocatedDeviceStatus:
    """Our `status.devices[]` entry for one attachment: what the pod's network sees of it."""
    net = NetworkDeviceData(
        interface_name=att.container_name if att.mode != "none" else att.host_name,
        hardware_address=att.mac or "",
        ips=tuple(ips),
    )
    return AllocatedDeviceStatus(
        pool=att.pool,
        device=att.device,
        share_id=att.share_id,
        conditions=(DeviceCondition("Ready", ready, reason, message),),
        network_data=net,
    )


def prepared_entry(att: Attachment) -> AllocatedDeviceStatus:
    """The entry right after prepare: where the interface will be."""
    if att.mode == "none":
        return entry(att, "Prepared", "admin access: interface stays on the host", att.ips)
    return entry(att, "Prepared", f"{att.host_name} will be {att.container_name} in the pod", att.ips)


class PodWatch:
    """Held NICs inside pods: their health, Attached once seen there, orphans sent home. The
    caller serialises the calls (the driver's lock)."""

    def __init__(
        self, sysfs_root: str, interval: float, clock: Callable[[], float], log: logs.Logger
    ) -> None:
        self._in_pods = health.InPods(sysfs_root, interval, clock)
        self._sysfs_root = sysfs_root
        self._interval = interval
        self._clock = clock
        self._orphans_at = float("-inf")
        self._log = log
        self.status: ClaimStatusWriter | None = None

    def forget(self, device: str) -> None:
        self._in_pods.forget(device)

    def clear(self) -> None:
        self._in_pods.clear()

    def health(self, held: Held) -> DeviceHealth:
        """A held NIC that is not on the host, looked at in its pod."""
        result, found = self._in_pods.health(held.attachment)
        if found:
            self._report_attached(held)
        return result

    def return_orphans(self, held: Iterable[Held]) -> bool:
        """Interfaces whose pod namespace has no process left go home. At most once per
        interval, and only where every process is visible (host PID namespace). True when one
        moved (the host view changed)."""
        now = self._clock()
        if now - self._orphans_at < self._interval:
            return False
        self._orphans_at = now
        pinned = [h for h in held if iplink.is_pinned_netns(h.attachment.pin)]
        if not pinned or not iplink.sees_all_processes():
            return False
        in_use = iplink.netns_in_use()
        moved = False
        for h in pinned:
            att = h.attachment
            try:
                done = attach.return_orphan(att, in_use, self._sysfs_root)
            except (ReleaseError, iplink.IpError, OSError) as e:
                self._log.error(f"cannot return {att.device} from its dead pod: {e}", device=att.device)
                continue
            if done is None:
                continue
            moved = True
            self._log.info(
                f"{att.device}: the pod's network namespace is gone; {done} (claim still prepared)",
                **logs.claim(h.claim),
                device=att.device,
            )
            h.reported_attached = False
            self._in_pods.forget(att.device)
            if self.status is not None:
                self.status.set_devices(h.claim, [entry(att, "PodGone", done, (), ready="False")])
        return moved

    def _report_attached(self, held: Held) -> None:
        """Once the hook put the interface into the pod: Ready=Attached with the pod-side IPs."""
        if held.reported_attached or self.status is None:
            return
        att = held.attachment
        try:
            found = iplink.addresses(att.container_name, att.pin)
            # link-local addresses exist on every link and say nothing about the pod's network;
            # the pod may add any number, the API takes MAX_IPS (more would fail every write)
            ips = tuple(a for a in found if not ipaddress.ip_interface(a).ip.is_link_local)[:MAX_IPS]
        except (iplink.IpError, ValueError):
            ips = att.ips
        held.reported_attached = True
        self.status.set_devices(
            held.claim, [entry(att, "Attached", f"{att.container_name} is in the pod", ips)]
        )
