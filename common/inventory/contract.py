"""What a driver declares to its inventory, and what it may call on it.

A driver that wants more than "scan once at start" returns a `Policy` from
`inventory_policy()` (capabilities.DeclaresPolicy): which udev subsystems mean "look again",
which sysfs listings make up the cheap signature polled every `interval`, and whether
unhealthy devices are tainted. A driver that pushes health itself, or knows when the host
changed (a NIC it brought back from a dead pod), gets an `InventoryHandle` through
`bind_inventory` (capabilities.UsesInventory).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from topodra.common.runtime.driver import DeviceHealth

DEFAULT_INTERVAL = 5.0
HEALTH_INTERVAL = 1.0
HEALTH_VALID_FOR = 10.0


@dataclass(frozen=True, slots=True)
class Policy:
    """How the inventory keeps one driver's device list current.

    The signature is read every `interval` seconds and a scan runs only when it changed, when
    a uevent of `subsystems` arrived, or when someone asked; an unchanged machine costs the
    listings only. Paths are relative to `sysfs_root`.
    """

    sysfs_root: str = "/"
    subsystems: tuple[str, ...] = ()  # udev subsystems whose events mean "scan again"
    listings: tuple[str, ...] = ()  # folders whose entry names are part of the signature
    links: tuple[tuple[str, str], ...] = ()  # (folder, link): each entry's link target counts too
    files: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (folder, files): each entry's file texts
    interval: float = DEFAULT_INTERVAL
    health_interval: float = HEALTH_INTERVAL  # how often `check_health` is asked, if offered
    health_valid_for: float = HEALTH_VALID_FOR  # a report older than this turns Unknown
    taint_unhealthy: bool = False
    taint_key: str = ""  # default: "<driver name>/unhealthy"


class InventoryHandle(Protocol):
    """The part of the inventory a driver may call, from any thread."""

    def request_rescan(self) -> None:
        """Scan again soon (events coming together are served by one scan)."""
        ...

    def report_health(self, health: Mapping[str, DeviceHealth], *, valid_for: float) -> None:
        """The complete health of the driver's devices now; devices not listed are Unknown, and
        so is everything once `valid_for` seconds pass without a newer report."""
        ...
