"""The health stream as the kubelet reads it, over both versions on the real DRA socket."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from topodra.common.runtime import health as health_module
from topodra.common.runtime.driver import Health
from topodra.common.runtime.health import HealthMonitor

from tests.kubelet.client import KubeletClient
from tests.kubelet.standins import TableDriver
from tests.unit.runtime_grpc.conftest import NODE, PluginFactory


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
    plugin, driver, _ = make_plugin(health_poll_interval=0.05, health_timeout_seconds=25)
    driver.forget_health("gpu-2")
    plugin.health.poll()
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
    plugin, driver, _ = make_plugin(health_poll_interval=0.05, health_resend_interval=0.3)
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
    plugin, driver, _ = make_plugin(health_poll_interval=0.05)
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


def test_a_failing_health_check_reports_unknown_with_the_reason(
    make_plugin: PluginFactory, kubelet: KubeletClient
) -> None:
    plugin, driver, _ = make_plugin(health_poll_interval=0.05)

    def broken() -> Any:
        raise OSError("sysfs read failed")

    driver.health = broken  # type: ignore[method-assign]
    kubelet.register(plugin.registration_socket)
    reader = Reader(kubelet.watch_health())
    try:
        msg = reader.next()
        while as_dict(msg)["gpu-0"][0] != 0:
            msg = reader.next()
        assert "sysfs read failed" in as_dict(msg)["gpu-0"][1]
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


def test_an_unchanged_answer_reuses_the_snapshot_and_any_change_replaces_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The poll runs every second: with the same devices and health it must not rebuild the
    snapshot, and yet every change (health, message, devices, a failed check and the recovery
    from it to the very answer given before) must show."""
    driver = TableDriver("gpu.topodra.io", ["gpu-0", "gpu-1"])
    monitor = HealthMonitor(driver, NODE)
    built: list[int] = []
    real_snapshot = health_module.snapshot

    def counting(*args: Any) -> Any:
        built.append(1)
        return real_snapshot(*args)

    monkeypatch.setattr(health_module, "snapshot", counting)

    def current() -> dict[str, tuple[Health, str]]:
        return {s.device: (s.health, s.message) for s in monitor._snapshot}

    assert monitor.poll() is True and len(built) == 1
    assert monitor.poll() is False and monitor.poll() is False
    assert len(built) == 1, "the snapshot was rebuilt although nothing changed"

    driver.set_health("gpu-1", Health.UNHEALTHY, "link down")
    assert monitor.poll() is True and current()["gpu-1"] == (Health.UNHEALTHY, "link down")
    driver.set_health("gpu-1", Health.UNHEALTHY, "link down twice")
    assert monitor.poll() is True and current()["gpu-1"] == (Health.UNHEALTHY, "link down twice")

    healthy = driver.health
    driver.health = lambda: (_ for _ in ()).throw(OSError("sysfs gone"))  # type: ignore[method-assign]
    assert monitor.poll() is True and current()["gpu-0"][0] is Health.UNKNOWN
    driver.health = healthy  # type: ignore[method-assign]
    assert monitor.poll() is True, "recovering to the answer from before the failure must show"
    assert current()["gpu-1"] == (Health.UNHEALTHY, "link down twice")
    assert current()["gpu-0"] == (Health.HEALTHY, "")

    driver.set_devices(["gpu-0", "gpu-1", "gpu-2"])
    assert monitor.poll() is True and set(current()) == {"gpu-0", "gpu-1", "gpu-2"}
