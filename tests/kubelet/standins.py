"""A small driver and claim processor for exercising the gRPC plane on its own.

`TableDriver` implements the real Driver protocol (the driver boundary) over a fixed device
list; `TableProcessor` implements ClaimProcessor over a table of allocations, standing in for
the claim core (claims.ClaimManager) whose own tests cover fetching, checkpointing and CDI.
Neither imitates the runtime under test: the runtime's sockets, servers and conversions are real.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from topodra.common.device import Device
from topodra.common.runtime.driver import (
    AllocatedDevice,
    ClaimRef,
    DeviceHealth,
    Health,
    OpaqueConfig,
    Preparation,
    PreparedDevice,
)
from topodra.common.runtime.seams import ClaimOutcome, ResultDevice


class TableDriver:
    def __init__(self, name: str, device_names: Sequence[str]) -> None:
        self.name = name
        self._devices = [Device(name=n) for n in device_names]
        self._health: dict[str, DeviceHealth] = {n: DeviceHealth(Health.HEALTHY) for n in device_names}
        self._lock = threading.Lock()

    def devices(self) -> Sequence[Device]:
        with self._lock:
            return list(self._devices)

    def set_devices(self, names: Sequence[str]) -> None:
        with self._lock:
            self._devices = [Device(name=n) for n in names]

    def set_health(self, device: str, health: Health, message: str = "") -> None:
        with self._lock:
            self._health[device] = DeviceHealth(health, message)

    def forget_health(self, device: str) -> None:
        with self._lock:
            self._health.pop(device, None)

    def prepare(
        self, claim: ClaimRef, results: Sequence[AllocatedDevice], config: Sequence[OpaqueConfig]
    ) -> Preparation:
        return Preparation(devices=tuple(PreparedDevice(r.request, r.pool, r.device) for r in results))

    def unprepare(self, claim: ClaimRef, preparation: Preparation) -> None:
        pass

    def restore(self, prepared: Mapping[ClaimRef, Preparation]) -> None:
        pass

    def health(self) -> Mapping[str, DeviceHealth]:
        with self._lock:
            return dict(self._health)


@dataclass
class TableProcessor:
    """uid -> devices; a uid not in the table is answered with a per-claim error."""

    driver: str
    allocations: dict[str, tuple[ResultDevice, ...]] = field(default_factory=dict)
    prepared: set[str] = field(default_factory=set)
    calls: list[tuple[str, tuple[ClaimRef, ...]]] = field(default_factory=list)
    fail_with: Exception | None = None

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimOutcome]:
        self.calls.append(("prepare", tuple(claims)))
        if self.fail_with is not None:
            raise self.fail_with
        out = {}
        for c in claims:
            if c.uid in self.allocations:
                self.prepared.add(c.uid)
                out[c.uid] = ClaimOutcome(devices=self.allocations[c.uid])
            else:
                out[c.uid] = ClaimOutcome(
                    error=f"claim {c.namespace}/{c.name}: not allocated to {self.driver}"
                )
        return out

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        self.calls.append(("unprepare", tuple(claims)))
        if self.fail_with is not None:
            raise self.fail_with
        for c in claims:
            self.prepared.discard(c.uid)
        return {c.uid: "" for c in claims}
