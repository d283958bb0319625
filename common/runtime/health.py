"""The DRAResourceHealth stream (v1 and v1alpha1) for one driver (shared spec §3).

The Driver protocol only answers `health()` when asked, so a monitor thread polls it and keeps
the current snapshot. Every open stream sends the complete device list when the snapshot
changes and at least every `resend_interval` seconds; each entry carries a timeout a little
above that interval, so the kubelet marks a device Unknown when this process stops reporting.
"""

from __future__ import annotations

import operator
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import grpc
from topodra.common import logs
from topodra.common.device import Device
from topodra.common.runtime import grpcglue, metrics
from topodra.common.runtime.driver import DeviceHealth, Driver, Health
from topodra.proto.dra_health.v1 import api_pb2 as v1
from topodra.proto.dra_health.v1alpha1 import api_pb2 as v1alpha1

VERSIONS: dict[str, ModuleType] = {"v1": v1, "v1alpha1": v1alpha1}
MESSAGE_MAX = 1024


@dataclass(frozen=True, slots=True)
class DeviceStatus:
    device: str
    health: Health
    message: str


def truncate(message: str) -> str:
    """The kubelet keeps at most 1024 characters; cut on our side so the end is marked."""
    return message if len(message) <= MESSAGE_MAX else message[: MESSAGE_MAX - 3] + "..."


def snapshot(devices: Sequence[Device], health: Mapping[str, DeviceHealth]) -> tuple[DeviceStatus, ...]:
    """Every published device, in name order; a device the driver did not mention is UNKNOWN."""
    unknown = DeviceHealth(Health.UNKNOWN)
    names = sorted({d.name for d in devices})
    return tuple(
        DeviceStatus(n, health.get(n, unknown).health, truncate(health.get(n, unknown).message))
        for n in names
    )


class HealthMonitor:
    def __init__(
        self,
        driver: Driver,
        pool: str,
        poll_interval: float = 1.0,
        resend_interval: float = 10.0,
        timeout_seconds: int = 30,
        clock: Callable[[], float] = time.time,
        on_devices: Callable[[Sequence[Device]], None] | None = None,
    ) -> None:
        self.driver = driver
        self.pool = pool
        self.poll_interval = poll_interval
        self.resend_interval = resend_interval
        self.timeout_seconds = timeout_seconds
        self._clock = clock
        self._on_devices = on_devices
        self._devices: list[Device] | None = None
        self._cond = threading.Condition()
        self._snapshot: tuple[DeviceStatus, ...] = ()
        # what the snapshot was built from: the driver's Device objects and its health answer
        self._inputs: tuple[tuple[Device, ...], dict[str, DeviceHealth]] | None = None
        self._generation = 0
        self._checked_at = 0.0
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._log = logs.get(__name__, driver=driver.name, pool=pool)

    # --- polling ------------------------------------------------------------------------------
    def poll(self) -> bool:
        """Ask the driver now; True when the snapshot changed. A failing driver makes every
        device UNKNOWN with the error as message, rather than silently keeping old news."""
        try:
            devices = self.driver.devices()
            try:
                current = self._snapshot_of(devices, self.driver.health())
            except Exception as e:
                self._log.exception("driver health check failed")
                failed = DeviceHealth(Health.UNKNOWN, f"health check failed: {type(e).__name__}: {e}")
                current = snapshot(devices, {d.name: failed for d in devices})
                self._inputs = None  # the next answer must replace this snapshot, even if unchanged
        except Exception:
            self._log.exception("driver could not list its devices for the health report")
            return False
        self._devices_seen(list(devices))
        with self._cond:
            self._checked_at = self._clock()
            changed = current != self._snapshot
            if changed:
                for old, new in _changes(self._snapshot, current):
                    self._log.info(
                        "device health changed",
                        device=new.device,
                        health=new.health.name,
                        message=new.message,
                        previous=old.health.name if old else None,
                    )
                self._snapshot = current
                self._generation += 1
                self._cond.notify_all()
            return changed

    def _snapshot_of(
        self, devices: Sequence[Device], health: Mapping[str, DeviceHealth]
    ) -> tuple[DeviceStatus, ...]:
        """`snapshot()`, reused while the driver answers with the very same Device objects and an
        equal health map: a poll every second then costs a comparison, not thousands of new
        objects built while holding the GIL that prepare calls wait for."""
        known = self._inputs
        if (
            known is not None
            and len(known[0]) == len(devices)
            and all(map(operator.is_, known[0], devices))
            and known[1] == health
        ):
            return self._snapshot
        current = snapshot(devices, health)
        self._inputs = (tuple(devices), dict(health))
        return current

    def _devices_seen(self, devices: list[Device]) -> None:
        """Hand a changed device list on (to the slice publisher); the first list always."""
        if devices == self._devices or self._on_devices is None:
            self._devices = devices
            return
        try:
            self._on_devices(devices)
            self._devices = devices
        except Exception:  # retried at the next poll, since _devices still holds the old list
            self._log.exception("publishing the device list failed", devices=len(devices))

    def start(self) -> None:
        self._stopped.clear()
        self.poll()
        self._thread = threading.Thread(target=self._loop, name=f"health-{self.driver.name}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopped.wait(self.poll_interval):
            self.poll()

    def stop(self) -> None:
        self._stopped.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # --- streaming ----------------------------------------------------------------------------
    def response(self, pb: ModuleType) -> Any:
        with self._cond:
            current, at = self._snapshot, int(self._checked_at)
        return pb.NodeWatchResourcesResponse(
            devices=[
                pb.DeviceHealth(
                    device=pb.DeviceIdentifier(pool_name=self.pool, device_name=s.device),
                    health=s.health.value,
                    last_updated_time=at,
                    health_check_timeout_seconds=self.timeout_seconds,
                    message=s.message,
                )
                for s in current
            ]
        )

    def watch(self, pb: ModuleType, context: grpc.ServicerContext) -> Iterator[Any]:
        """Yield full snapshots until the client goes away or the monitor stops."""
        done = threading.Event()

        def closed() -> None:
            done.set()
            with self._cond:
                self._cond.notify_all()

        context.add_callback(closed)
        gauge = metrics.HEALTH_STREAMS.labels(self.driver.name)
        gauge.inc()
        self._log.info("kubelet opened a health stream", version=pb.DESCRIPTOR.package)
        try:
            seen = -1
            while not done.is_set() and not self._stopped.is_set():
                seen = self._wait_after(seen, done)
                if done.is_set() or self._stopped.is_set():
                    break
                yield self.response(pb)
        finally:
            gauge.dec()
            self._log.info("health stream closed", version=pb.DESCRIPTOR.package)

    def _wait_after(self, generation: int, done: threading.Event) -> int:
        """Wait for a snapshot newer than `generation`, the resend interval, or the end."""

        def ready() -> bool:
            return self._generation != generation or done.is_set() or self._stopped.is_set()

        with self._cond:
            self._cond.wait_for(ready, timeout=self.resend_interval)
            return self._generation

    def handlers(self) -> list[grpc.GenericRpcHandler[Any, Any]]:
        return [
            grpcglue.service_handler(
                pb.DESCRIPTOR.services_by_name["DRAResourceHealth"],
                {"NodeWatchResources": self._bind(pb)},
            )
            for pb in VERSIONS.values()
        ]

    def _bind(self, pb: ModuleType) -> Callable[[Any, grpc.ServicerContext], Iterator[Any]]:
        return lambda request, context: self.watch(pb, context)


def _changes(
    old: tuple[DeviceStatus, ...], new: tuple[DeviceStatus, ...]
) -> Iterator[tuple[DeviceStatus | None, DeviceStatus]]:
    before = {s.device: s for s in old}
    for s in new:
        if before.get(s.device) != s:
            yield before.get(s.device), s
