"""What a driver may offer beyond scan, prepare, unprepare and restore, checked in one place.

Each optional capability is a Protocol below (`holds_in_memory`, a class attribute, is read
directly). `of(driver)` is asked only while the runtime composes a driver's service (the
inventory, the plugin, the claim core, `serve`), never on a call path, and
hands out what it found; no other module asks a driver what it can do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from topodra.common.inventory.contract import InventoryHandle, Policy
from topodra.common.runtime.driver import ClaimStatusWriter, DeviceHealth, Driver


@runtime_checkable
class DeclaresPolicy(Protocol):
    """When to scan again and whether to taint (common/inventory); without it a driver is
    scanned once at start and when asked."""

    def inventory_policy(self) -> Policy: ...


@runtime_checkable
class ChecksHealth(Protocol):
    """Health read from the host: the inventory asks every `Policy.health_interval` seconds and
    takes each answer as a report valid for `Policy.health_valid_for` seconds. Without it (and
    without pushed reports) every device is Unknown."""

    def check_health(self) -> Mapping[str, DeviceHealth]: ...


@runtime_checkable
class UsesInventory(Protocol):
    """A driver that pushes health or asks for scans itself gets the handle once, before start."""

    def bind_inventory(self, inventory: InventoryHandle) -> None: ...


@runtime_checkable
class WritesClaimStatus(Protocol):
    """A driver that writes `ResourceClaim.status.devices` (the NIC's networkData) gets the
    writer once, before serving."""

    def set_status_writer(self, writer: ClaimStatusWriter) -> None: ...


@runtime_checkable
class ListensToPublisher(Protocol):
    """A driver that turns what the API server did with its slices into advice (fields a
    gate-off server dropped) gets the publisher's status after each sync."""

    def on_publisher_status(self, status: Any) -> None: ...


@runtime_checkable
class Serves(Protocol):
    """A driver that runs something beside prepare/unprepare (the CPU driver's NRI connection).

    The runtime calls `start` once the checkpoint is restored and before the kubelet can reach
    the plugin, `stop` after the plugin stopped, and shows `status_detail` in /readyz.
    """

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def status_detail(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Capabilities:
    policy: Policy
    # A class attribute `holds_in_memory = True`: everything the driver's prepare does lives in
    # its own process (holds in its memory; effects outside it, like an NRI plugin's cpusets,
    # derived from those holds again when it starts). A kill or a restart then undoes an
    # unfinished prepare by itself, and the claim core writes no started mark (the provisional
    # CDI spec) before the driver acts (docs/design/claim-lifecycle.md). Without it the mark is
    # written.
    holds_in_memory: bool = False
    check_health: Callable[[], Mapping[str, DeviceHealth]] | None = None
    bind_inventory: Callable[[InventoryHandle], None] | None = None
    set_status_writer: Callable[[ClaimStatusWriter], None] | None = None
    on_publisher_status: Callable[[Any], None] | None = None
    serves: Serves | None = None


def of(driver: Driver) -> Capabilities:
    return Capabilities(
        policy=driver.inventory_policy() if isinstance(driver, DeclaresPolicy) else Policy(),
        holds_in_memory=getattr(driver, "holds_in_memory", False) is True,
        check_health=driver.check_health if isinstance(driver, ChecksHealth) else None,
        bind_inventory=driver.bind_inventory if isinstance(driver, UsesInventory) else None,
        set_status_writer=driver.set_status_writer if isinstance(driver, WritesClaimStatus) else None,
        on_publisher_status=driver.on_publisher_status if isinstance(driver, ListensToPublisher) else None,
        serves=driver if isinstance(driver, Serves) else None,
    )
