"""The DRAResourceHealth stream (v1 and v1alpha1) for one driver (docs/design/kubelet.md).

The stream shows the inventory's health: every new snapshot is sent at once to every open
stream, and the current one again at least every `resend_interval` seconds. Each entry carries
a timeout a little above that interval, so the kubelet marks a device Unknown when this process
stops reporting; a driver that stops reporting shows as Unknown through the inventory itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from topodra.common import logs
from topodra.common.inventory.compose import DeviceStatus
from topodra.common.inventory.inventory import Inventory, Snapshot
from topodra.common.runtime import metrics
from topodra.common.runtime.grpcserver.connection import CallContext, Method
from topodra.common.runtime.grpcserver.service import methods
from topodra.proto.dra_health.v1 import api_pb2 as v1
from topodra.proto.dra_health.v1alpha1 import api_pb2 as v1alpha1

VERSIONS: dict[str, ModuleType] = {"v1": v1, "v1alpha1": v1alpha1}
MESSAGE_MAX = 1024


def truncate(message: str) -> str:
    """The kubelet keeps at most 1024 characters; cut on our side so the end is marked."""
    return message if len(message) <= MESSAGE_MAX else message[: MESSAGE_MAX - 3] + "..."


class HealthStream:
    def __init__(
        self,
        inventory: Inventory,
        pool: str,
        resend_interval: float = 10.0,
        timeout_seconds: int = 30,
    ) -> None:
        self.driver_name = inventory.driver.name
        self.pool = pool
        self.resend_interval = resend_interval
        self.timeout_seconds = timeout_seconds
        self._cond = threading.Condition()
        self._snapshot: tuple[DeviceStatus, ...] = ()
        self._generation = 0
        self._stopped = threading.Event()
        self._inventory = inventory
        self._log = logs.get(__name__, driver=self.driver_name, pool=pool)
        inventory.subscribe(self._update)

    def _update(self, snapshot: Snapshot) -> None:
        with self._cond:
            if snapshot.health != self._snapshot:
                self._snapshot = snapshot.health
                self._generation += 1
                self._cond.notify_all()

    def start(self) -> None:
        self._stopped.clear()

    def stop(self) -> None:
        self._stopped.set()
        with self._cond:
            self._cond.notify_all()

    # --- streaming ----------------------------------------------------------------------------
    def response(self, pb: ModuleType) -> Any:
        with self._cond:
            current = self._snapshot
        at = int(self._inventory.confirmed_at())
        return pb.NodeWatchResourcesResponse(
            devices=[
                pb.DeviceHealth(
                    device=pb.DeviceIdentifier(pool_name=self.pool, device_name=s.device),
                    health=s.health.value,
                    last_updated_time=at,
                    health_check_timeout_seconds=self.timeout_seconds,
                    message=truncate(s.message),
                )
                for s in current
            ]
        )

    def watch(self, pb: ModuleType, context: CallContext) -> Iterator[Any]:
        """Yield full snapshots until the client goes away or the monitor stops."""
        done = threading.Event()

        def closed() -> None:
            done.set()
            with self._cond:
                self._cond.notify_all()

        context.add_callback(closed)
        gauge = metrics.HEALTH_STREAMS.labels(self.driver_name)
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

    def methods(self) -> dict[str, Method]:
        out: dict[str, Method] = {}
        for pb in VERSIONS.values():
            out.update(
                methods(
                    pb.DESCRIPTOR.services_by_name["DRAResourceHealth"],
                    {"NodeWatchResources": self._bind(pb)},
                )
            )
        return out

    def _bind(self, pb: ModuleType) -> Callable[[Any, CallContext], Iterator[Any]]:
        return lambda request, context: self.watch(pb, context)
