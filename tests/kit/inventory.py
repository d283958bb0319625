"""A driver as its inventory would publish it now: one synchronous look, no threads.

Tests of a driver's scan and health go through the real Inventory (merge of held devices,
taint policy, health reports), exactly what the publisher and the health stream receive.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from topodra.common.device import Device
from topodra.common.inventory import Inventory, Snapshot
from topodra.common.inventory.compose import DeviceStatus


def look(driver: Any) -> Snapshot:
    return Inventory(driver).refresh()


def published(driver: Any) -> dict[str, Device]:
    """Name -> device, as published (held devices included, taints applied)."""
    return {d.name: d for d in look(driver).devices}


def published_list(driver: Any) -> list[Device]:
    return list(look(driver).devices)


def health(driver: Any) -> dict[str, DeviceStatus]:
    """Name -> health as the health stream would report it."""
    return {s.device: s for s in look(driver).health}


def no_uevents(subsystems: Sequence[str]) -> Any:
    """An `open_monitor` for inventories that must rely on polling alone."""
    raise OSError("uevents are off in this test")


def wait_for(condition: Callable[[], bool], what: str, deadline: float = 30.0) -> None:
    """Wait until `condition()` holds; the deadline only ends a hung test, it measures nothing."""
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)
