"""When the inventory scans: a real kernel uevent (root: the test makes a veth pair), a changed
signature when polling is all there is, requests, bursts, and failed scans."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from topodra.common.inventory import Policy
from topodra.common.inventory import signature as sig
from topodra.common.inventory.triggers import Triggers, open_monitor

from tests.kit.inventory import no_uevents, wait_for


class Calls:
    def __init__(self, answer: bool = True) -> None:
        self.reasons: list[str] = []
        self.answer = answer
        self.event = threading.Event()

    def __call__(self, reason: str) -> bool:
        self.reasons.append(reason)
        self.event.set()
        return self.answer


@pytest.fixture
def started() -> Any:
    made: list[Triggers] = []
    yield made
    for t in made:
        t.stop()


def start(made: list[Triggers], calls: Calls, **kw: Any) -> Triggers:
    triggers = Triggers(calls, **kw)
    made.append(triggers)
    triggers.start()
    return triggers


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2")
def test_a_kernel_uevent_triggers_a_scan(started: list[Triggers]) -> None:
    calls = Calls()
    triggers = start(
        started, calls, subsystems=("net",), interval=3600, open_monitor=lambda s: open_monitor(s, "kernel")
    )
    if not triggers.udev_active:
        pytest.skip("no uevent socket in this environment")
    name = f"shp{uuid.uuid4().hex[:6]}"
    try:
        subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", name + "p"], check=True)
        wait_for(lambda: "uevent" in calls.reasons, "a scan for the new veth")
        assert triggers.events >= 1 and triggers.polls == 0  # (other tests make links too: no exact counts)
    finally:
        subprocess.run(["ip", "link", "del", name], check=False, capture_output=True)


def test_without_uevents_a_changed_listing_is_found_by_polling(
    started: list[Triggers], tmp_path: Path
) -> None:
    policy = Policy(sysfs_root=str(tmp_path), listings=("sys/class/net",), interval=0.02)
    (tmp_path / "sys/class/net").mkdir(parents=True)
    calls = Calls()
    triggers = start(
        started,
        calls,
        subsystems=("net",),
        interval=policy.interval,
        signature=lambda: sig.read(policy),
        open_monitor=no_uevents,
    )
    assert not triggers.udev_active
    wait_for(lambda: triggers.polls >= 5, "five polls")
    assert calls.reasons == []  # an unchanged machine: no scan
    (tmp_path / "sys/class/net/eth9").mkdir()
    wait_for(lambda: calls.reasons == ["signature"], "a scan for the new interface")
    polls = triggers.polls
    wait_for(lambda: triggers.polls >= polls + 5, "five more polls")
    assert calls.reasons == ["signature"]


def test_the_signature_sees_listings_links_and_small_files(tmp_path: Path) -> None:
    base = tmp_path / "sys/bus/pci/devices"
    (base / "0000:01:00.0").mkdir(parents=True)
    (tmp_path / "drv").mkdir()
    net = tmp_path / "sys/class/net/eth0"
    net.mkdir(parents=True)
    (net / "operstate").write_text("up\n")
    policy = Policy(
        sysfs_root=str(tmp_path),
        listings=("sys/class/drm",),
        links=(("sys/bus/pci/devices", "driver"),),
        files=(("sys/class/net", ("operstate",)),),
    )
    before = sig.read(policy)
    assert sig.read(policy) == before
    (base / "0000:01:00.0/driver").symlink_to(tmp_path / "drv")  # bound
    bound = sig.read(policy)
    assert bound != before
    (net / "operstate").write_text("down\n")
    assert sig.read(policy) != bound


class PipeMonitor:
    """Stands in for pyudev's monitor (a readable fd and poll()) so that a burst is exact: the
    kernel's socket gives no control over how many events arrive together."""

    def __init__(self) -> None:
        self.read, self.write = os.pipe()

    def fileno(self) -> int:
        return self.read

    def poll(self, timeout: float = 0) -> Any:
        os.read(self.read, 1)
        return type("Dev", (), {"subsystem": "net", "action": "add", "sys_path": "/sys/x"})()

    def emit(self, n: int) -> None:
        os.write(self.write, b"e" * n)


def test_a_burst_of_events_gives_one_scan(started: list[Triggers]) -> None:
    calls = Calls()
    monitor = PipeMonitor()

    def opened(subsystems: Sequence[str]) -> Any:
        return monitor

    triggers = start(started, calls, subsystems=("net",), interval=3600, debounce=0.2, open_monitor=opened)
    monitor.emit(12)
    wait_for(lambda: triggers.events == 12 and calls.reasons == ["uevent"], "one scan for twelve events")
    monitor.emit(1)  # a later event: another scan
    wait_for(lambda: calls.reasons == ["uevent", "uevent"], "a second scan")


def test_a_failed_scan_is_retried_and_a_request_is_served(started: list[Triggers]) -> None:
    calls = Calls(answer=False)
    start(started, calls, interval=3600, open_monitor=no_uevents)
    started[0].request()
    wait_for(lambda: calls.reasons[:2] == ["request", "retry"], "a retry after the failed scan")
    calls.answer = True
    wait_for(lambda: calls.reasons[-1] == "retry" and len(calls.reasons) >= 3, "the retry that works")
    settled = len(calls.reasons)
    started[0].request()
    wait_for(lambda: len(calls.reasons) == settled + 1, "the next request")
    assert calls.reasons[-1] == "request"
