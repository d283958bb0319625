"""The health stream as the kubelet reads it, over both versions on the real DRA socket.

The driver here pushes its health to its inventory (TableDriver); the stream follows the
inventory's snapshots.

Stand-in kept (the Python kubelet client): stream versions and timings byte by byte, which the
real kubelet (tests/node/test_health.py) never exposes.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from topodra.common.inventory import Policy
from topodra.common.runtime.driver import DeviceHealth, Health
from topodra.common.runtime.plugin import Plugin, PluginOptions

from tests.kubelet.client import KubeletClient
from tests.kubelet.standins import TableDriver, TableProcessor
from tests.unit.runtime_grpc.conftest import DRIVER, NODE, PluginFactory, allocations


class Reader:
    """Reads a stream on a thread so the test can wait for messages with a timeout."""

    def __init__(self, stream: Iterator[Any]) -> None:
        self.stream = stream
        self.messages: queue.Queue[tuple[float, Any]] = queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for m in self.stream:
                self.messages.put((time.monotonic(), m))
            self.messages.put((time.monotonic(), "end of stream"))
        except Exception as e:  # cancelled at the end of the test
            self.messages.put((time.monotonic(), e))

    def next(self, timeout: float = 5.0) -> Any:
        _, m = self.messages.get(timeout=timeout)
        assert not isinstance(m, Exception), m
        return m

    def close(self) -> None:
        self.stream.cancel()  # type: ignore[attr-defined]
        self.thread.join(5)


def as_dict(response: Any) -> dict[str, tuple[int, str]]:
    return {d.device.device_name: (d.health, d.message) for d in response.devices}


@pytest.mark.parametrize("version", ["v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"])
def test_first_message_is_the_full_snapshot(
    make_plugin: PluginFactory, kubelet: KubeletClient, version: str
) -> None:
    plugin, driver, _ = make_plugin(health_timeout_seconds=25)
    driver.forget_health("gpu-2")
    kubelet.register(plugin.registration_socket)
    reader = Reader(kubelet.watch_health(version))
    try:
        first = reader.next()
        assert as_dict(first) == {"gpu-0": (1, ""), "gpu-1": (1, ""), "gpu-2": (0, "")}  # unlisted: UNKNOWN
        for d in first.devices:
            assert d.device.pool_name == NODE
            assert d.health_check_timeout_seconds == 25
            assert abs(d.last_updated_time - time.time()) < 5
    finally:
        reader.close()


def test_a_change_is_pushed_and_snapshots_repeat_without_change(
    make_plugin: PluginFactory, kubelet: KubeletClient
) -> None:
    plugin, driver, _ = make_plugin(health_resend_interval=0.3)
    kubelet.register(plugin.registration_socket)
    v1 = Reader(kubelet.watch_health("v1.DRAResourceHealth"))
    alpha = Reader(kubelet.watch_health("v1alpha1.DRAResourceHealth"))
    try:
        for r in (v1, alpha):
            assert as_dict(r.next())["gpu-1"] == (1, "")
        driver.set_health("gpu-1", Health.UNHEALTHY, "ECC errors: " + "x" * 2000)
        for r in (v1, alpha):
            msg = r.next()
            while as_dict(msg)["gpu-1"][0] != 2:  # a periodic resend may come first
                msg = r.next()
            _, message = as_dict(msg)["gpu-1"]
            assert len(message) == 1024 and message.endswith("...") and message.startswith("ECC errors")
            assert len(msg.devices) == 3, "each message is the complete list"
        # No further change: the full snapshot keeps coming at the resend interval.
        while not v1.messages.empty():
            v1.next()
        repeats = [as_dict(v1.next(timeout=3)) for _ in range(3)]
        assert all(r == repeats[0] for r in repeats) and repeats[0]["gpu-1"][0] == 2
    finally:
        v1.close()
        alpha.close()


def test_device_list_changes_reach_the_stream(make_plugin: PluginFactory, kubelet: KubeletClient) -> None:
    plugin, driver, _ = make_plugin()
    kubelet.register(plugin.registration_socket)
    reader = Reader(kubelet.watch_health())
    try:
        assert set(as_dict(reader.next())) == {"gpu-0", "gpu-1", "gpu-2"}
        driver.set_devices(["gpu-0", "gpu-3"])
        msg = reader.next()
        while set(as_dict(msg)) != {"gpu-0", "gpu-3"}:
            msg = reader.next()
        assert as_dict(msg)["gpu-3"] == (0, "")
    finally:
        reader.close()


class CheckedDriver(TableDriver):
    """Health read from the host every `interval` (capabilities.ChecksHealth), as the real
    drivers do; `broken` makes the check raise."""

    def __init__(self, interval: float) -> None:
        super().__init__(DRIVER, ["gpu-0", "gpu-1"])
        self.interval = interval
        self.broken: Exception | None = None

    def bind_inventory(self, inventory: Any) -> None:  # health comes from the checks only
        self.inventory = inventory

    def inventory_policy(self) -> Policy:
        return Policy(health_interval=self.interval)

    def check_health(self) -> dict[str, DeviceHealth]:
        if self.broken is not None:
            raise self.broken
        return {n: DeviceHealth(Health.HEALTHY) for n in ("gpu-0", "gpu-1")}


@pytest.fixture
def checked_plugin(kubelet_root: Any) -> Any:
    made: list[Plugin] = []

    def make(interval: float = 0.05) -> tuple[Plugin, CheckedDriver]:
        driver = CheckedDriver(interval)
        plugin = Plugin(driver, TableProcessor(DRIVER, allocations()), PluginOptions(kubelet_root, NODE))
        plugin.start()
        made.append(plugin)
        return plugin, driver

    yield make
    for p in made:
        p.stop()


def test_a_failing_health_check_reports_unknown_with_the_reason(
    checked_plugin: Any, kubelet: KubeletClient
) -> None:
    plugin, driver = checked_plugin()
    kubelet.register(plugin.registration_socket)
    reader = Reader(kubelet.watch_health())
    try:
        assert as_dict(reader.next())["gpu-0"] == (1, "")
        driver.broken = OSError("sysfs read failed")
        msg = reader.next()
        while as_dict(msg)["gpu-0"][0] != 0:
            msg = reader.next()
        assert "sysfs read failed" in as_dict(msg)["gpu-0"][1]
        driver.broken = None  # recovering to the very answer given before the failure shows
        msg = reader.next()
        while as_dict(msg)["gpu-0"][0] != 1:
            msg = reader.next()
    finally:
        reader.close()


def test_a_report_past_its_deadline_turns_unknown(make_plugin: PluginFactory, kubelet: KubeletClient) -> None:
    """A driver whose health source stops reporting is not frozen at its last good news."""
    plugin, driver, _ = make_plugin()
    driver.valid_for = 0.5
    driver.set_health("gpu-1", Health.UNHEALTHY, "link down")  # the last report, valid 0.5 s
    kubelet.register(plugin.registration_socket)
    reader = Reader(kubelet.watch_health())
    try:
        msg = reader.next()
        while as_dict(msg)["gpu-0"][0] != 0:  # no message is asked for: the deadline sends it
            msg = reader.next()
        assert {name: h for name, (h, _) in as_dict(msg).items()} == {"gpu-0": 0, "gpu-1": 0, "gpu-2": 0}
        assert as_dict(msg)["gpu-0"][1].startswith("no health report for")
    finally:
        reader.close()


def test_stream_ends_when_the_plugin_stops(make_plugin: PluginFactory, kubelet: KubeletClient) -> None:
    plugin, _, _ = make_plugin(health_resend_interval=30, stop_grace=60)
    kubelet.register(plugin.registration_socket)
    reader = Reader(kubelet.watch_health())
    reader.next()
    started = time.monotonic()
    plugin.stop()
    # The stream is ended, not waited out: stopping does not sit through the 60 s grace period.
    assert time.monotonic() - started < 30
    _, end = reader.messages.get(timeout=10)
    reader.thread.join(5)
    assert not reader.thread.is_alive()
    assert end == "end of stream", end  # a clean end: the kubelet reopens it at the next instance
