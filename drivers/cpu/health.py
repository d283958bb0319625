"""Device health from the CPUs' online state, re-read from sysfs on every poll.

A CPU that goes offline (hot-unplug, `echo 0 > online`, firmware isolation) takes its exclusive
work with it: a device with any offline CPU is unhealthy, so the kubelet can tell the pods that
use it. A poll reads the kernel's online mask (`cpu/online`, one small file for every CPU), never
a full discovery; only where that file is missing or not understood does it read each CPU's
`cpuN/online` (on a 256-CPU machine that was 256 files a second: 53 of 534 py-spy samples of
the plugin holding the GIL under load in the side-by-side benchmark, docs/bench/latest.md).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from topodra.common.runtime.driver import DeviceHealth, Health
from topodra.common.topology.parse import parse_cpulist
from topodra.drivers.cpu.policy import fmt

CPU_DIR = "sys/devices/system/cpu"
OFFLINE_REASON = "CpuOffline"  # the taint value with --cpu-taint-unhealthy


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


def online_mask(root: Path) -> frozenset[int] | None:
    """The CPUs the kernel has online, from `cpu/online` (the mask every `cpuN/online` follows);
    None when the file is missing, unreadable or not a CPU list."""
    try:
        with open(root / CPU_DIR / "online", "rb") as f:
            raw = f.read(64 * 1024)  # a list of every other CPU of 8192 is ~40 KB
    except OSError:
        return None
    try:
        text = raw.decode("ascii").strip("\x00 \t\r\n")
    except UnicodeDecodeError:
        return None
    return parse_cpulist(text) if text else None


def device_health(root: Path, cpus: Iterable[int], online: frozenset[int] | None = None) -> DeviceHealth:
    """From the online mask when there is one (a CPU outside it is offline), else from each CPU's
    own file."""
    offline: list[int] = []
    unknown: list[int] = []
    for c in cpus:
        state = (c in online) if online is not None else cpu_online(root, c)
        if state is False:
            offline.append(c)
        elif state is None:
            unknown.append(c)
    if offline:
        return DeviceHealth(Health.UNHEALTHY, f"CPUs {fmt(offline)} are offline", OFFLINE_REASON)
    if unknown:
        return DeviceHealth(Health.UNKNOWN, f"online state of CPUs {fmt(unknown)} cannot be read")
    return DeviceHealth(Health.HEALTHY)


def health(root: Path, devices: Mapping[str, Iterable[int]]) -> dict[str, DeviceHealth]:
    if not os.path.isdir(root / CPU_DIR):
        return {name: DeviceHealth(Health.UNKNOWN, f"{root / CPU_DIR} is not readable") for name in devices}
    online = online_mask(root)
    return {name: device_health(root, cpus, online) for name, cpus in devices.items()}
