"""One driver's kubelet plugin: its sockets, its gRPC servers and what hangs off them.

    plugin = Plugin(driver, processor, PluginOptions(kubelet_root=..., node_name=...), publisher)
    plugin.start()        # inventory, DRA socket, publisher, then the registration socket
    ...
    plugin.stop()         # registration socket first, so the kubelet stops routing to us

`Plugin.run()` does both around SIGTERM/SIGINT; `serve_all` does it for several plugins in one
process (`topodra serve all`). Claim processing lives behind `ClaimProcessor`; publishing
ResourceSlices behind `Publisher` (common/publisher's SlicePublisher fits it). The plugin runs
the driver's inventory (common/inventory): the publisher and the health stream follow its
snapshots. A driver whose unprepare gives a device back to the host (the NIC driver) asks the
inventory to scan again itself; an unprepare costs the others no scan.
"""

from __future__ import annotations

import gc
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from topodra.common import logs
from topodra.common.device import Device
from topodra.common.inventory import DevicesTo, Inventory
from topodra.common.runtime import capabilities, sockets
from topodra.common.runtime.draserver import DRAServicer
from topodra.common.runtime.driver import Driver
from topodra.common.runtime.grpcserver.connection import Method
from topodra.common.runtime.grpcserver.server import GrpcServer
from topodra.common.runtime.health import HealthStream
from topodra.common.runtime.registration import RegistrationServicer
from topodra.common.runtime.seams import ClaimProcessor

DEFAULT_KUBELET_ROOT = Path("/var/lib/kubelet")


class Publisher(Protocol):
    """Keeps this node's ResourceSlices of one driver equal to the device list it was given."""

    def set_devices(self, devices: Sequence[Device]) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...


@dataclass(frozen=True, slots=True)
class PluginOptions:
    kubelet_root: Path = DEFAULT_KUBELET_ROOT
    node_name: str = ""
    pod_uid: str | None = None  # set: rolling-update socket names (two instances side by side)
    pool: str | None = None  # the ResourceSlice pool of our devices; default: the node name
    # Threads serving calls, started as calls need them. Each prepare GETs its claim on its worker
    # before it queues, so this bounds the GETs in flight: with 16, 64 calls at once sent their
    # GETs 16 at a time, and the API server and etcd spent more CPU per claim than with 64
    # (docs/bench/latest.md). 64 is also the kept-alive connection pool's size
    # (kubeapi.loader.CONNECTION_POOL_SIZE); health streams hold a worker each while open.
    grpc_workers: int = 64
    health_resend_interval: float = 10.0
    health_timeout_seconds: int = 30
    stop_grace: float = 5.0
    registry_dir: Path | None = None  # default <kubelet root>/plugins_registry
    plugin_dir: Path | None = None  # default <kubelet root>/plugins/<driver>


def plugin_dir(driver_name: str, options: PluginOptions) -> Path:
    """The driver's own folder: `<kubelet root>/plugins/<driver>` unless set explicitly."""
    return options.plugin_dir or options.kubelet_root / "plugins" / sockets.check_driver_name(driver_name)


@dataclass(slots=True)
class _Server:
    server: GrpcServer
    socket: sockets.OwnedSocket


@dataclass
class PluginStatus:
    driver: str
    serving: bool
    registered: bool | None  # None: the kubelet has not called NotifyRegistrationStatus yet
    registration_error: str = ""
    sockets: dict[str, str] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)  # the driver's own (capabilities.Serves)

    @property
    def ready(self) -> bool:
        return self.serving and self.registered is True


class Plugin:
    def __init__(
        self,
        driver: Driver,
        processor: ClaimProcessor,
        options: PluginOptions,
        publisher: Publisher | None = None,
        inventory: Inventory | None = None,
    ) -> None:
        self.driver = driver
        self.serves = capabilities.of(driver).serves
        self.processor = processor
        self.options = options
        self.publisher = publisher
        self.inventory = inventory or Inventory(driver)
        name = sockets.check_driver_name(driver.name)
        self.registry_dir = options.registry_dir or options.kubelet_root / "plugins_registry"
        self.plugin_dir = plugin_dir(name, options)
        # Both names are computed (and length-checked) before anything is created.
        self.dra_socket = sockets.dra_socket(self.plugin_dir, options.pod_uid)
        self.registration_socket = sockets.registration_socket(self.registry_dir, name, options.pod_uid)
        self.registration = RegistrationServicer(name, self.dra_socket)
        self.dra = DRAServicer(name, processor)
        self.health = HealthStream(
            self.inventory,
            options.pool or options.node_name,
            resend_interval=options.health_resend_interval,
            timeout_seconds=options.health_timeout_seconds,
        )
        if publisher is not None:
            self.inventory.subscribe(DevicesTo(publisher.set_devices))
        self._dra_server: _Server | None = None
        self._reg_server: _Server | None = None
        self._lock = threading.Lock()
        self._log = logs.get(__name__, driver=name)

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            if self._dra_server is not None:
                return
            try:
                self.inventory.start()
                self.health.start()
                self._dra_server = self._listen(
                    self.dra_socket,
                    {**self.dra.methods(), **self.health.methods()},
                    self.options.grpc_workers,
                )
                if self.publisher is not None:
                    self.publisher.start()
                self._reg_server = self._listen(self.registration_socket, self.registration.methods(), 2)
            except BaseException:
                self._stop_locked()
                raise
        self._log.info(
            "plugin serving",
            dra_socket=str(self.dra_socket),
            registration_socket=str(self.registration_socket),
        )

    def stop(self) -> None:
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        # Registration first: once its socket is gone the kubelet deregisters this instance and
        # sends new calls elsewhere. Health streams never finish by themselves, so they are ended
        # before the DRA server stops; prepare calls in flight there get the grace period.
        for attr in ("_reg_server", "_dra_server"):
            running: _Server | None = getattr(self, attr)
            if running is None:
                continue
            if attr == "_dra_server":
                self.health.stop()
            running.socket.remove()
            running.server.stop(self.options.stop_grace)
            running.socket.remove()
            setattr(self, attr, None)
        self.health.stop()
        self.inventory.stop()
        if self.publisher is not None:
            try:
                self.publisher.stop()
            except Exception:
                self._log.exception("publisher failed to stop")
        self._log.info("plugin stopped")

    def _listen(self, path: Path, routes: dict[str, Method], workers: int) -> _Server:
        with sockets.owner_only():
            path.parent.mkdir(parents=True, exist_ok=True)
        if sockets.remove_stale(path):
            self._log.warning("removed stale socket", socket=str(path))
        server = GrpcServer(path.name, routes, workers)
        with sockets.owner_only():
            server.listen(path)
        owned = sockets.OwnedSocket.record(path)
        server.start()
        return _Server(server, owned)

    def run(self, stop: threading.Event | None = None) -> None:
        """Serve until SIGTERM/SIGINT (or `stop` is set), then clean up."""
        serve_all([self], stop)

    # --- state --------------------------------------------------------------------------------
    def status(self) -> PluginStatus:
        reg = self.registration.status
        detail: dict[str, Any] = {}
        if self.serves is not None:
            try:
                detail = dict(self.serves.status_detail())
            except Exception as e:  # a probe must answer whatever the driver's state
                detail = {"error": f"{type(e).__name__}: {e}"}
        return PluginStatus(
            driver=self.driver.name,
            serving=self._dra_server is not None and self._reg_server is not None,
            registered=None if reg is None else reg.registered,
            registration_error="" if reg is None else reg.error,
            sockets={"dra": str(self.dra_socket), "registration": str(self.registration_socket)},
            detail=detail,
        )


class Service(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


def settle_heap() -> None:
    """Collect what start-up left behind, then take every object alive now (modules, classes,
    the discovered machine, the API client's configuration) out of the cyclic collector's reach.
    A full collection otherwise walks all of them, some 20 ms on the benchmark machine, while
    every call in flight waits. Objects made later are collected as before; start-up objects
    are still freed when their last reference goes. For a process's entry point, once its
    plugins serve (serve_all's `on_started`): a library caller's heap is its own business."""
    gc.collect()
    gc.freeze()


def serve_all(
    plugins: Sequence[Service],
    stop: threading.Event | None = None,
    on_started: Callable[[], None] | None = None,
) -> None:
    """Start every plugin, wait for SIGTERM/SIGINT or `stop`, stop them all (also on errors)."""
    stop = stop or threading.Event()
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda signum, frame: stop.set())
    started: list[Service] = []
    try:
        for p in plugins:
            p.start()
            started.append(p)
        if on_started is not None:
            on_started()
        while not stop.wait(1.0):
            pass
    finally:
        for p in reversed(started):
            p.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
