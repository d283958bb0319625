"""Re-discovery triggers with the real kernel uevent socket (root: a veth pair is created and
removed) and the periodic fallback when udev is unavailable."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from topodra.common.publisher.rescan import Rescanner


class Calls:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.event = threading.Event()

    def __call__(self) -> None:
        self.times.append(time.monotonic())
        self.event.set()


def _can_make_links() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


@pytest.mark.skipif(not _can_make_links(), reason="needs root and iproute2 to create a veth pair")
def test_a_link_event_triggers_one_rescan_within_2_s() -> None:
    calls = Calls()
    rescanner = Rescanner(calls, period=3600, debounce=0.2)
    rescanner.start()
    name = f"td{uuid.uuid4().hex[:6]}"
    try:
        if not rescanner.udev_active:
            pytest.skip("no uevent socket in this environment")
        time.sleep(0.2)
        began = time.monotonic()
        subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", name + "p"], check=True)
        assert calls.event.wait(2.0), "no rescan within 2 s of the event"
        assert calls.times[0] - began < 2.0
        assert rescanner.events >= 1  # (other tests may add links too: no exact counts here)
    finally:
        subprocess.run(["ip", "link", "del", name], check=False, capture_output=True)
        rescanner.stop()


def test_without_udev_the_periodic_rescan_runs() -> None:
    calls = Calls()

    def unavailable(subsystems: Sequence[str]) -> Any:
        raise OSError("no netlink here")

    rescanner = Rescanner(calls, period=0.3, open_monitor=unavailable)
    rescanner.start()
    time.sleep(1.05)
    rescanner.stop()
    assert not rescanner.udev_active
    assert 2 <= len(calls.times) <= 4


def test_a_failing_callback_does_not_stop_rescanning() -> None:
    count = []

    def broken() -> None:
        count.append(1)
        raise RuntimeError("discovery blew up")

    rescanner = Rescanner(broken, period=0.2, open_monitor=lambda s: None)
    rescanner.start()
    time.sleep(0.7)
    rescanner.stop()
    assert len(count) >= 2


class PipeMonitor:
    """Stands in for pyudev's monitor (a readable fd + poll()), so a burst can be exact."""

    def __init__(self) -> None:
        self.read, self.write = os.pipe()

    def fileno(self) -> int:
        return self.read

    def poll(self, timeout: float = 0) -> Any:
        os.read(self.read, 1)
        return type("Dev", (), {"subsystem": "net", "action": "add", "sys_path": "/sys/x"})()

    def emit(self, n: int) -> None:
        os.write(self.write, b"e" * n)


def test_a_burst_of_events_gives_one_rescan() -> None:
    calls = Calls()
    monitor = PipeMonitor()
    rescanner = Rescanner(calls, period=3600, debounce=0.2, open_monitor=lambda s: monitor)
    rescanner.start()
    try:
        began = time.monotonic()
        monitor.emit(12)
        assert calls.event.wait(2.0)
        time.sleep(0.4)
        assert len(calls.times) == 1 and rescanner.events == 12
        assert calls.times[0] - began < 1.0
        calls.event.clear()
        monitor.emit(1)  # a later event: another rescan
        assert calls.event.wait(2.0) and len(calls.times) == 2
    finally:
        rescanner.stop()
