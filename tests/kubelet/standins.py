"""A small driver and claim processor for exercising the gRPC plane on its own.

`TableDriver` implements the real Driver protocol (the driver boundary) over a device list the
test sets, and pushes its health to the inventory the way a driver with event-driven health
would (capabilities.UsesInventory); `TableProcessor` implements ClaimProcessor over a table of
allocations, standing in for the claim core (claims.ClaimManager) whose own tests cover
fetching, checkpointing and CDI. Neither imitates the runtime under test: the runtime's
sockets, servers and conversions are real.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from topodra.common.device import Device
from topodra.common.inventory import InventoryHandle
from topodra.common.runtime.driver import (
    AllocatedDevice,
    ClaimRef,
    DeviceHealth,
    Health,
    OpaqueConfig,
    Preparation,
    PreparedDevice,
    Scan,
)
from topodra.common.runtime.seams import ClaimOutcome, ResultDevice

VALID_FOR = 3600.0  # the tests' reports do not expire unless a test says so


class TableDriver:
    def __init__(self, name: str, device_names: Sequence[str]) -> None:
        self.name = name
        self._devices = [Device(name=n) for n in device_names]
        self._health: dict[str, DeviceHealth] = {n: DeviceHealth(Health.HEALTHY) for n in device_names}
        self._lock = threading.Lock()
        self.inventory: InventoryHandle | None = None
        self.valid_for = VALID_FOR

    def scan(self) -> Scan:
        with self._lock:
            return Scan(tuple(self._devices))

    def bind_inventory(self, inventory: InventoryHandle) -> None:
        self.inventory = inventory
        self._push()

    def _push(self) -> None:
        with self._lock:
            health, inventory = dict(self._health), self.inventory
        if inventory is not None:
            inventory.report_health(health, valid_for=self.valid_for)

    def set_devices(self, names: Sequence[str]) -> None:
        """A device comes or goes; the inventory is told, as a uevent would tell it."""
        with self._lock:
            self._devices = [Device(name=n) for n in names]
            inventory = self.inventory
        if inventory is not None:
            inventory.request_rescan()

    def set_health(self, device: str, health: Health, message: str = "") -> None:
        with self._lock:
            self._health[device] = DeviceHealth(health, message)
        self._push()

    def forget_health(self, device: str) -> None:
        with self._lock:
            self._health.pop(device, None)
        self._push()

    def prepare(
        self, claim: ClaimRef, results: Sequence[AllocatedDevice], config: Sequence[OpaqueConfig]
    ) -> Preparation:
        return Preparation(devices=tuple(PreparedDevice(r.request, r.pool, r.device) for r in results))

    def unprepare(self, claim: ClaimRef, preparation: Preparation) -> None:
        pass

    def restore(self, prepared: Mapping[ClaimRef, Preparation]) -> None:
        pass


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
