"""Accelerator health from three sysfs facts, re-read on every poll (a few small reads each).

- the PCI function is gone from `sys/bus/pci/devices` (hot-unplug, surprise removal, a GPU that
  fell off the bus): unhealthy, "device removed";
- no kernel driver is bound (unbind, a driver that failed probe): unhealthy;
- PCIe AER fatal errors rising: `aer_dev_fatal` TOTAL_ERR_FATAL above the value first seen for
  this function. The kernel never lowers the counter of a device, so a device stays unhealthy
  until it is re-enumerated (a lower count: a new device, the baseline starts again) or the
  driver restarts.

The driver adds a fourth: present and bound, but prepare would refuse it (an NVIDIA GPU whose
minor nobody tells): unhealthy too, so a taint keeps pods from waiting on it forever.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from topodra.common.runtime.driver import DeviceHealth, Health
from topodra.common.topology.hostfiles import read_text

BUS = "sys/bus/pci/devices"
CANNOT_PREPARE = "cannot be prepared"


def fatal_total(text: str | None) -> int | None:
    """TOTAL_ERR_FATAL of an `aer_dev_fatal` file (the sum of its lines on kernels without it)."""
    if text is None:
        return None
    total = 0
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            return None
        if parts[0].startswith("TOTAL"):
            return int(parts[1])
        total += int(parts[1])
    return total


def bound_driver(fn_dir: Path) -> str | None:
    try:
        return os.path.basename(os.readlink(fn_dir / "driver").rstrip("/"))
    except OSError:
        return None


@dataclass(frozen=True, slots=True)
class Observation:
    present: bool
    driver: str | None
    fatal: int | None


def observe(root: Path, address: str) -> Observation:
    fn_dir = root / BUS / address
    if not os.path.isdir(fn_dir):
        return Observation(False, None, None)
    return Observation(True, bound_driver(fn_dir), fatal_total(read_text(fn_dir / "aer_dev_fatal")))


@dataclass
class AerBaselines:
    """TOTAL_ERR_FATAL first seen per function; a lower value means a re-enumerated device."""

    seen: dict[str, int] = field(default_factory=dict)

    def rise(self, address: str, value: int | None) -> tuple[int, int] | None:
        """(baseline, now) when the counter rose above its baseline, else None."""
        if value is None:
            return None
        base = self.seen.get(address)
        if base is None or value < base:
            self.seen[address] = value
            return None
        return (base, value) if value > base else None

    def forget(self, address: str) -> None:
        self.seen.pop(address, None)


def judge(o: Observation, rise: tuple[int, int] | None, was_driver: str | None) -> DeviceHealth:
    """The health, with the reason an unhealthy device's taint carries."""
    if not o.present:
        return DeviceHealth(
            Health.UNHEALTHY, "device removed: the PCI function is gone from sysfs", "DeviceRemoved"
        )
    if o.driver is None:
        what = f"kernel driver {was_driver} unbound" if was_driver else "no kernel driver is bound"
        return DeviceHealth(Health.UNHEALTHY, what, "DriverUnbound")
    if rise is not None:
        base, now = rise
        return DeviceHealth(
            Health.UNHEALTHY,
            f"PCIe AER: {now - base} fatal error(s) since first seen (TOTAL_ERR_FATAL {base} -> {now})",
            "AERFatal",
        )
    return DeviceHealth(Health.HEALTHY, f"bound to {o.driver}")
