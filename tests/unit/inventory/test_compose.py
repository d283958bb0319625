"""What the inventory publishes, as pure functions: held devices kept in place, taints from
health, and health reports that expire."""

from __future__ import annotations

from topodra.common.device import Device, Taint
from topodra.common.inventory.compose import HealthBoard, published, statuses, tainted
from topodra.common.runtime.driver import DeviceHealth, Health, Scan

KEY = "test.topodra.io/unhealthy"


def devices(*names: str) -> tuple[Device, ...]:
    return tuple(Device(n) for n in names)


def test_a_held_device_gone_from_the_host_stays_where_it_was() -> None:
    everything = devices("cpu-0", "cpu-1", "cpu-2", "cpu-3", "cpu-4")
    gone = everything[2]
    scan = Scan(tuple(d for d in everything if d is not gone), {gone.name: gone})
    assert published(scan, previous=[d.name for d in everything]) == everything


def test_without_history_a_held_device_goes_in_name_order_and_the_host_copy_wins() -> None:
    fresh = Device("nic-1", {"index": 99})
    scan = Scan(
        (Device("nic-0"), fresh, Device("nic-3")), {"nic-1": Device("nic-1"), "nic-2": Device("nic-2")}
    )
    merged = published(scan)
    assert [d.name for d in merged] == ["nic-0", "nic-1", "nic-2", "nic-3"]
    assert merged[1] is fresh


def test_unhealthy_devices_are_tainted_with_the_reason_and_nothing_else_changes() -> None:
    base = (Device("a"), Device("b", taints=(Taint("other", "x"),)), Device("c"))
    health = {
        "a": DeviceHealth(Health.HEALTHY),
        "b": DeviceHealth(Health.UNHEALTHY, "link down", "LinkDown"),
        "c": DeviceHealth(Health.UNHEALTHY, "odd"),
    }
    out = tainted(base, health, KEY)
    assert out[0] is base[0]
    assert out[1].taints == (Taint("other", "x"), Taint(KEY, "LinkDown", "NoSchedule"))
    assert out[2].taints == (Taint(KEY, "Unhealthy", "NoSchedule"),)
    healthy = {n: DeviceHealth(Health.HEALTHY) for n in ("a", "b", "c")}
    assert tainted(base, healthy, KEY) is base


def test_statuses_cover_every_device_in_name_order_unknown_without_a_report() -> None:
    got = statuses(devices("b", "a"), {"b": DeviceHealth(Health.HEALTHY, "fine")})
    assert [(s.device, s.health, s.message) for s in got] == [
        ("a", Health.UNKNOWN, ""),
        ("b", Health.HEALTHY, "fine"),
    ]


def test_a_report_holds_until_its_deadline_then_everything_is_unknown() -> None:
    board = HealthBoard()
    assert board.next_deadline() is None
    board.report({"a": DeviceHealth(Health.HEALTHY)}, now=100.0, valid_for=10.0)
    assert board.next_deadline() == 110.0
    assert board.effective(["a", "b"], 109.0) == {"a": DeviceHealth(Health.HEALTHY)}
    stale = board.effective(["a", "b"], 112.0)
    assert {n: h.health for n, h in stale.items()} == {"a": Health.UNKNOWN, "b": Health.UNKNOWN}
    assert stale["a"].message == "no health report for 12 s"
    assert board.next_deadline() is None  # noticed once, no more wake-ups for it
    board.report({"a": DeviceHealth(Health.UNHEALTHY, "gone")}, now=113.0, valid_for=10.0)
    assert board.effective(["a"], 114.0)["a"].health is Health.UNHEALTHY


def test_a_failed_check_makes_everything_unknown_with_why_until_the_next_report() -> None:
    board = HealthBoard()
    board.report({"a": DeviceHealth(Health.HEALTHY)}, now=0.0, valid_for=10.0)
    board.fail("health check failed: OSError: sysfs gone", now=1.0, valid_for=10.0)
    assert board.effective(["a"], 2.0)["a"] == DeviceHealth(
        Health.UNKNOWN, "health check failed: OSError: sysfs gone"
    )
    board.report({"a": DeviceHealth(Health.HEALTHY)}, now=3.0, valid_for=10.0)
    assert board.effective(["a"], 4.0)["a"].health is Health.HEALTHY
