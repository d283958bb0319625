"""What each simulated node has, read back from the ResourceSlices the real drivers build.

The study's metrics look devices up by (node, driver, name); parsing the API form of the slices
(not the drivers' Python objects) means the figures describe exactly what the scheduler saw.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ACCELERATOR = "accelerator.topodra.io"
NIC = "nic.topodra.io"
CPU = "cpu.topodra.io"

_NUMA = "resource.kubernetes.io/numaNode"
_ROOT = "resource.kubernetes.io/pcieRoot"
_SOCKET = "topology.topodra.io/socket"
_SWITCH = "topology.topodra.io/pcieSwitch"
_CPUS = "cpu.topodra.io/cpu"


@dataclass(frozen=True, slots=True)
class Dev:
    """The topology of one published device; None where the driver published no such attribute."""

    driver: str
    name: str
    numa: int | None = None
    socket: int | None = None
    root: str | None = None
    switch: str | None = None
    cpus: int = 0  # consumable CPU capacity (CPU devices only)


@dataclass(frozen=True, slots=True)
class Machine:
    """One machine type (a synthetic spec or a captured tree) and its devices."""

    kind: str
    devices: tuple[Dev, ...]

    def of(self, driver: str) -> tuple[Dev, ...]:
        return tuple(d for d in self.devices if d.driver == driver)

    def device(self, driver: str, name: str) -> Dev:
        for d in self.devices:
            if d.driver == driver and d.name == name:
                return d
        raise KeyError(f"{self.kind}: no {driver} device {name!r}")


def _scalar(attrs: Mapping[str, Any], key: str) -> Any:
    value = attrs.get(key)
    if not isinstance(value, Mapping) or len(value) != 1:
        return None
    (inner,) = value.values()
    return inner


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def device_from_api(driver: str, body: Mapping[str, Any]) -> Dev:
    attrs = body.get("attributes") or {}
    cpus = 0
    capacity = (body.get("capacity") or {}).get(_CPUS)
    if isinstance(capacity, Mapping):
        cpus = int(str(capacity.get("value", "0")))
    return Dev(
        driver=driver,
        name=str(body["name"]),
        numa=_int_or_none(_scalar(attrs, _NUMA)),
        socket=_int_or_none(_scalar(attrs, _SOCKET)),
        root=_str_or_none(_scalar(attrs, _ROOT)),
        switch=_str_or_none(_scalar(attrs, _SWITCH)),
        cpus=cpus,
    )


def machine_from_slices(kind: str, slices: Iterable[Mapping[str, Any]]) -> Machine:
    devices: list[Dev] = []
    for s in slices:
        spec = s["spec"]
        devices += [device_from_api(spec["driver"], d) for d in spec.get("devices") or ()]
    return Machine(kind, tuple(devices))
