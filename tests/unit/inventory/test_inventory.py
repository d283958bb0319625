"""The inventory with a driver the test controls: when snapshots are made, what they hold, and
what the subscribers (the publisher, the health stream) get."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from topodra.common.device import Device, Taint
from topodra.common.inventory import DevicesTo, Inventory, Policy, Snapshot
from topodra.common.runtime.driver import DeviceHealth, Health, Scan

from tests.kit.inventory import no_uevents, wait_for

NAME = "test.topodra.io"


class Machine:
    """A driver over a device list and a health map the test edits (ChecksHealth)."""

    name = NAME

    def __init__(self, *names: str, taint: bool = False) -> None:
        self.devices = [Device(n) for n in names]
        self.held: dict[str, Device] = {}
        self.health = {n: DeviceHealth(Health.HEALTHY) for n in names}
        self.taint = taint
        self.scan_error: Exception | None = None
        self.check_error: Exception | None = None
        self.scans = 0
        self.checks = 0

    def inventory_policy(self) -> Policy:
        return Policy(taint_unhealthy=self.taint)

    def scan(self) -> Scan:
        self.scans += 1
        if self.scan_error is not None:
            raise self.scan_error
        return Scan(tuple(self.devices), dict(self.held))

    def check_health(self) -> Mapping[str, DeviceHealth]:
        self.checks += 1
        if self.check_error is not None:
            raise self.check_error
        return dict(self.health)

    def prepare(self, *args: Any) -> Any:
        raise NotImplementedError

    def unprepare(self, *args: Any) -> None:
        raise NotImplementedError

    def restore(self, prepared: Any) -> None:
        pass


class Recorder:
    def __init__(self) -> None:
        self.snapshots: list[Snapshot] = []
        self.device_lists: list[Sequence[Device]] = []

    def __call__(self, snapshot: Snapshot) -> None:
        self.snapshots.append(snapshot)


def test_only_changes_make_snapshots_and_health_changes_keep_the_device_tuple() -> None:
    machine = Machine("a", "b")
    inventory = Inventory(machine)
    seen, handed = Recorder(), Recorder()
    inventory.subscribe(seen)
    inventory.subscribe(DevicesTo(handed.device_lists.append))
    first = inventory.refresh()
    assert [d.name for d in first.devices] == ["a", "b"] and first.generation == 1
    inventory.refresh()
    inventory.refresh()
    assert len(seen.snapshots) == 1, "an unchanged look must not make a snapshot"

    machine.health["b"] = DeviceHealth(Health.UNHEALTHY, "gone bad")
    second = inventory.refresh()
    assert second.generation == 2 and second.devices is first.devices
    assert second.health_of("b") is not None and second.health_of("b").health is Health.UNHEALTHY  # type: ignore[union-attr]
    assert len(handed.device_lists) == 1, "a health-only change is not the publisher's business"

    machine.devices.append(Device("c"))
    third = inventory.refresh()
    assert [d.name for d in third.devices] == ["a", "b", "c"]
    assert len(handed.device_lists) == 2 and list(handed.device_lists[-1]) == list(third.devices)


def test_the_taint_policy_is_applied_once_here_with_the_drivers_reason() -> None:
    machine = Machine("a", "b", taint=True)
    inventory = Inventory(machine)
    machine.health["a"] = DeviceHealth(Health.UNHEALTHY, "link down", "LinkDown")
    devices = {d.name: d for d in inventory.refresh().devices}
    assert devices["a"].taints == (Taint(f"{NAME}/unhealthy", "LinkDown", "NoSchedule"),)
    assert devices["b"].taints == ()
    machine.health["a"] = DeviceHealth(Health.HEALTHY)
    assert all(not d.taints for d in inventory.refresh().devices)
    untainted = Machine("a")
    untainted.health["a"] = DeviceHealth(Health.UNHEALTHY, "link down", "LinkDown")
    assert Inventory(untainted).refresh().devices[0].taints == ()


def test_held_devices_stay_published_while_the_host_lost_them() -> None:
    machine = Machine("a", "b", "c")
    inventory = Inventory(machine)
    inventory.refresh()
    b = machine.devices.pop(1)
    machine.held["b"] = b
    assert [d.name for d in inventory.refresh().devices] == ["a", "b", "c"]
    del machine.held["b"]  # its claim is unprepared
    assert [d.name for d in inventory.refresh().devices] == ["a", "c"]


def test_a_pushed_report_turns_unknown_after_its_deadline() -> None:
    now = [1000.0]
    machine = Machine("a")
    inventory = Inventory(machine, clock=lambda: now[0])
    inventory.refresh()
    inventory.report_health({"a": DeviceHealth(Health.UNHEALTHY, "hot")}, valid_for=30.0)
    now[0] += 29.0
    machine.check_error = RuntimeError("stuck")  # no fresh report from the check either
    inventory._compose()  # what the triggers thread does at the deadline
    assert inventory.snapshot().health_of("a").health is Health.UNHEALTHY  # type: ignore[union-attr]
    now[0] += 2.0
    inventory._compose()
    status = inventory.snapshot().health_of("a")
    assert status is not None and status.health is Health.UNKNOWN
    assert status.message == "no health report for 31 s"


def test_a_failing_scan_keeps_what_was_published_and_is_retried() -> None:
    machine = Machine("a")
    inventory = Inventory(machine, open_monitor=no_uevents)
    machine.scan_error = OSError("sysfs unreadable")
    inventory.start()
    try:
        assert inventory.snapshot().generation == 0  # nothing published yet, nothing invented
        machine.scan_error = None
        wait_for(lambda: inventory.snapshot().generation > 0, "the retry after the failed first scan")
        assert inventory.scans["retry"] == 1
        machine.scan_error = OSError("sysfs unreadable again")
        machine.devices = []
        inventory.request_rescan()
        wait_for(lambda: machine.scans >= 3, "the requested scan")
        assert [d.name for d in inventory.snapshot().devices] == ["a"]
    finally:
        inventory.stop()


def test_a_request_is_served_at_once_without_polling() -> None:
    machine = Machine("a")
    inventory = Inventory(machine, open_monitor=no_uevents)
    inventory.start()
    try:
        machine.devices.append(Device("b"))
        inventory.request_rescan()
        wait_for(lambda: len(inventory.snapshot().devices) == 2, "the requested scan")
        assert inventory.scans == {"start": 1, "request": 1} and inventory.polls == 0
    finally:
        inventory.stop()


def test_one_broken_subscriber_does_not_starve_the_others() -> None:
    machine = Machine("a")
    inventory = Inventory(machine)

    def broken(snapshot: Snapshot) -> None:
        raise RuntimeError("subscriber bug")

    seen = Recorder()
    inventory.subscribe(broken)
    inventory.subscribe(seen)
    inventory.refresh()
    assert len(seen.snapshots) == 1


def test_refresh_raises_what_the_scan_raised() -> None:
    machine = Machine("a")
    machine.scan_error = OSError("no sysfs")
    with pytest.raises(OSError, match="no sysfs"):
        Inventory(machine).refresh()
