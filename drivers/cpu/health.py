"""Device health from the CPUs' online state, re-read from sysfs on every poll.

A CPU that goes offline (hot-unplug, `echo 0 > online`, firmware isolation) takes its exclusive
work with it: a device with any offline CPU is unhealthy, so the kubelet can tell the pods that
use it. Only `cpuN/online` files are read (a few small reads per second), never a full discovery.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from topodra.common.runtime.driver import DeviceHealth, Health
from topodra.drivers.cpu.policy import fmt

CPU_DIR = "sys/devices/system/cpu"


def cpu_online(root: Path, cpu: int) -> bool | None:
    """True/False from `cpuN/online`; a CPU without that file (cpu0 often) is online while its
    folder exists; None when the file exists but cannot be read or understood."""
    base = root / CPU_DIR / f"cpu{cpu}"
    try:
        text = (base / "online").read_text().strip("\x00 \t\r\n")
    except FileNotFoundError:
        return base.is_dir()
    except OSError as e:
        if e.errno == errno.ENOTDIR:
            return False
        return None
    if text == "1":
        return True
    if text == "0":
        return False
    return None


def device_health(root: Path, cpus: Iterable[int]) -> DeviceHealth:
    offline: list[int] = []
    unknown: list[int] = []
    for c in cpus:
        state = cpu_online(root, c)
        if state is False:
            offline.append(c)
        elif state is None:
            unknown.append(c)
    if offline:
        return DeviceHealth(Health.UNHEALTHY, f"CPUs {fmt(offline)} are offline")
    if unknown:
        return DeviceHealth(Health.UNKNOWN, f"online state of CPUs {fmt(unknown)} cannot be read")
    return DeviceHealth(Health.HEALTHY)


def health(root: Path, devices: Mapping[str, Iterable[int]]) -> dict[str, DeviceHealth]:
    if not os.path.isdir(root / CPU_DIR):
        return {name: DeviceHealth(Health.UNKNOWN, f"{root / CPU_DIR} is not readable") for name in devices}
    return {name: device_health(root, cpus) for name, cpus in devices.items()}
