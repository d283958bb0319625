"""What is published, as pure functions of a scan, the health reports and the taint policy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from topodra.common.device import Device, Taint
from topodra.common.runtime.driver import DeviceHealth, Health, Scan

UNKNOWN = DeviceHealth(Health.UNKNOWN)


@dataclass(frozen=True, slots=True)
class DeviceStatus:
    """One device's health as the health stream reports it."""

    device: str
    health: Health
    message: str = ""


def published(scan: Scan, previous: Sequence[str] = ()) -> tuple[Device, ...]:
    """The scan's devices in the driver's order plus held devices it did not find.

    A held device goes back where it was in `previous` (the last published order: right after
    its nearest earlier neighbour still present), so that its absence from the host does not
    shift, and rewrite, the other slices. Without history it goes before the first device whose
    name sorts after it, which keeps a name-ordered list name-ordered.
    """
    result = list(scan.devices)
    present = {d.name for d in result}
    missing = [d for name, d in scan.held.items() if name not in present]
    position = {name: i for i, name in enumerate(previous)}
    for device in sorted(missing, key=lambda d: (position.get(d.name, len(position)), d.name)):
        if device.name in position:
            before = set(previous[: position[device.name]])
            at = next((i + 1 for i in range(len(result) - 1, -1, -1) if result[i].name in before), 0)
        else:
            at = next((i for i, d in enumerate(result) if d.name > device.name), len(result))
        result.insert(at, device)
        present.add(device.name)
    return tuple(result)


def tainted(devices: tuple[Device, ...], health: Mapping[str, DeviceHealth], key: str) -> tuple[Device, ...]:
    """Unhealthy devices carry `key=<reason>:NoSchedule`, so the scheduler stops choosing them
    (the kubelet uses health only for pod status). The same tuple when nothing is unhealthy."""
    sick = {n for n, h in health.items() if h.health is Health.UNHEALTHY}
    if not sick.intersection(d.name for d in devices):
        return devices
    return tuple(
        replace(d, taints=(*d.taints, Taint(key, health[d.name].reason or "Unhealthy", "NoSchedule")))
        if d.name in sick
        else d
        for d in devices
    )


def statuses(devices: Sequence[Device], health: Mapping[str, DeviceHealth]) -> tuple[DeviceStatus, ...]:
    """Every published device in name order; a device without a report is Unknown."""
    return tuple(
        DeviceStatus(n, health.get(n, UNKNOWN).health, health.get(n, UNKNOWN).message)
        for n in sorted({d.name for d in devices})
    )


class HealthBoard:
    """The last health report and until when it holds.

    A report is the driver's complete answer (like a health stream message): it replaces the
    one before. Once its deadline passes every device is Unknown, so a stuck or dead health
    check shows instead of freezing the last good news.
    """

    def __init__(self) -> None:
        self._health: Mapping[str, DeviceHealth] = {}
        self._failure = ""
        self._reported_at: float | None = None
        self._deadline: float | None = None
        self._expired = False

    def report(self, health: Mapping[str, DeviceHealth], now: float, valid_for: float) -> None:
        self._health, self._failure = dict(health), ""
        self._stamp(now, valid_for)

    def fail(self, message: str, now: float, valid_for: float) -> None:
        """The check itself failed: every device Unknown with why, until the next report."""
        self._health, self._failure = {}, message
        self._stamp(now, valid_for)

    def _stamp(self, now: float, valid_for: float) -> None:
        self._reported_at, self._deadline, self._expired = now, now + valid_for, False

    def next_deadline(self) -> float | None:
        """When the current report expires, unless that was already noticed."""
        return None if self._expired else self._deadline

    def effective(self, names: Sequence[str], now: float) -> dict[str, DeviceHealth]:
        if self._deadline is not None and now >= self._deadline:
            self._expired = True
            age = now - (self._reported_at or now)
            stale = DeviceHealth(Health.UNKNOWN, f"no health report for {age:.0f} s")
            return {n: stale for n in names}
        if self._failure:
            failed = DeviceHealth(Health.UNKNOWN, self._failure)
            return {n: failed for n in names}
        return {n: h for n in names if (h := self._health.get(n)) is not None}
