"""An NRI plugin that stays connected: register, answer the runtime's calls, reconnect.

    plugin = NriPlugin(handler, name="cpu.topodra.io", socket_path="/var/run/nri/nri.sock")
    plugin.start()          # background thread: connect, register, serve; reconnect when lost
    plugin.update_containers([...])   # unsolicited changes (never from inside a handler call)
    plugin.stop()

The handshake (docs/design/nri.md): the plugin calls `Runtime.RegisterPlugin(name, index)`;
the runtime answers, calls `Plugin.Configure` (the plugin says which events it wants) and then
`Plugin.Synchronize` with every pod and container it knows, possibly in parts (`more`), and
from then on the subscribed events. A plugin slower than the runtime's request timeout (2 s by
default, sent in Configure) is disconnected; so is one that does not register in time. Any loss
of the connection (runtime restart, timeout, protocol error) brings the plugin back to the
connect loop, and the next Synchronize tells the handler the whole state again.

The handler (`Handler`) sees only decoded messages and returns response messages. Older runtimes
deliver post-events and pod events through `StateChange`; they reach the same handler methods.
Unsolicited updates go through `update_containers` from a thread of the caller's: the runtime
holds its own lock while it waits for a handler, so asking it for updates from inside a handler
would wait on itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from google.protobuf.message import Message as ProtoMessage
from topodra.common import logs
from topodra.common.nri import conn as nriconn
from topodra.proto.nri.v1alpha1 import api_pb2 as api

PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
DEFAULT_SOCKET = "/var/run/nri/nri.sock"
NRI_VERSION = "v0.12"  # the API level this client implements (what RegisterPlugin reports)
DEFAULT_REQUEST_TIMEOUT = 2.0  # seconds, until Configure says otherwise
DEFAULT_REGISTRATION_TIMEOUT = 5.0
MAX_SYNC_OBJECTS = 100_000  # pods + containers over all parts of one Synchronize


class Handler:
    """What a driver implements; every method has a harmless default. `events` lists the
    events to subscribe to (api.Event values); only those reach the handler."""

    events: frozenset[int] = frozenset()

    def connected(self, runtime: RuntimeInfo) -> None:
        """Configure arrived: the runtime accepted the registration."""

    def disconnected(self, reason: str) -> None:
        """The connection is gone; state learnt from it may be stale until the next
        synchronize."""

    def synchronize(
        self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
    ) -> Sequence[api.ContainerUpdate]:
        return ()

    def create_container(self, request: api.CreateContainerRequest) -> api.CreateContainerResponse:
        return api.CreateContainerResponse()

    def update_container(self, request: api.UpdateContainerRequest) -> api.UpdateContainerResponse:
        return api.UpdateContainerResponse()

    def stop_container(self, request: api.StopContainerRequest) -> api.StopContainerResponse:
        return api.StopContainerResponse()

    def container_event(self, event: int, pod: api.PodSandbox, container: api.Container) -> None:
        """POST_CREATE, START, POST_START, POST_UPDATE, REMOVE_CONTAINER."""

    def pod_event(self, event: int, pod: api.PodSandbox) -> None:
        """RUN, STOP, REMOVE, (POST_)UPDATE_POD_SANDBOX."""


@dataclass(frozen=True, slots=True)
class RuntimeInfo:
    name: str
    version: str
    nri_version: str
    request_timeout: float  # seconds
    registration_timeout: float


class State(Enum):
    CONNECTING = "connecting"  # no connection (socket missing, refused, or lost)
    REGISTERING = "registering"  # connected, waiting for Configure/Synchronize
    SYNCHRONIZED = "synchronized"  # serving events


@dataclass
class Status:
    state: State = State.CONNECTING
    socket: str = ""
    runtime: str = ""  # "containerd v2.4.2"
    last_error: str = ""
    synchronizations: int = 0  # completed since start
    since: float = field(default_factory=time.time)

    def as_dict(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "socket": self.socket,
            "runtime": self.runtime,
            "last_error": self.last_error,
            "synchronizations": self.synchronizations,
        }


def event_mask(events: frozenset[int]) -> int:
    mask = 0
    for e in events:
        if not api.UNKNOWN < e < api.LAST:
            raise ValueError(f"not an NRI event: {e}")
        mask |= 1 << (e - 1)
    return mask


class _Call:
    """Decodes one Plugin method's request and encodes its answer."""

    def __init__(self, request: type[ProtoMessage], run: Callable[[Any], ProtoMessage]) -> None:
        self.request = request
        self.run = run


class NriPlugin:
    def __init__(
        self,
        handler: Handler,
        name: str,
        socket_path: str = DEFAULT_SOCKET,
        index: str = "10",
        retry_interval: float = 5.0,
    ) -> None:
        if not (len(index) == 2 and index.isdigit() and index.isascii()):
            raise ValueError(f"NRI plugin index must be two digits, got {index!r}")
        if not name or any(not (c.isascii() and (c.isalnum() or c in "-_.+")) for c in name):
            raise ValueError(f"NRI plugin name {name!r} may only hold [a-zA-Z0-9_.+-]")
        self.handler = handler
        self.name = name
        self.index = index
        self.socket_path = socket_path
        self.retry_interval = retry_interval
        self._mask = event_mask(handler.events)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._conn: nriconn.Connection | None = None
        self._status = Status(socket=socket_path)
        self._synced = threading.Event()
        self._sync_parts: list[api.SynchronizeRequest] = []
        self._request_timeout = DEFAULT_REQUEST_TIMEOUT
        self._log = logs.get("topodra.common.nri", plugin=name)
        self._calls: dict[str, _Call] = {
            "Configure": _Call(api.ConfigureRequest, self._configure),
            "Synchronize": _Call(api.SynchronizeRequest, self._synchronize),
            "Shutdown": _Call(api.Empty, self._shutdown),
            "CreateContainer": _Call(api.CreateContainerRequest, handler.create_container),
            "UpdateContainer": _Call(api.UpdateContainerRequest, handler.update_container),
            "StopContainer": _Call(api.StopContainerRequest, handler.stop_container),
            "StateChange": _Call(api.StateChangeEvent, self._state_change),
            "ValidateContainerAdjustment": _Call(
                api.ValidateContainerAdjustmentRequest, lambda r: api.ValidateContainerAdjustmentResponse()
            ),
        }
        container_events = {
            "PostCreateContainer": api.POST_CREATE_CONTAINER,
            "StartContainer": api.START_CONTAINER,
            "PostStartContainer": api.POST_START_CONTAINER,
            "PostUpdateContainer": api.POST_UPDATE_CONTAINER,
            "RemoveContainer": api.REMOVE_CONTAINER,
        }
        pod_events = {
            "RunPodSandbox": api.RUN_POD_SANDBOX,
            "StopPodSandbox": api.STOP_POD_SANDBOX,
            "RemovePodSandbox": api.REMOVE_POD_SANDBOX,
            "UpdatePodSandbox": api.UPDATE_POD_SANDBOX,
            "PostUpdatePodSandbox": api.POST_UPDATE_POD_SANDBOX,
        }
        for method, event in container_events.items():
            response = getattr(api, f"{method}Response")
            self._calls[method] = _Call(
                getattr(api, f"{method}Request"), self._container_event(event, response)
            )
        for method, event in pod_events.items():
            response = getattr(api, f"{method}Response")
            self._calls[method] = _Call(getattr(api, f"{method}Request"), self._pod_event(event, response))

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._synced.clear()  # wait_synchronized answers for this start's connection
        self._thread = threading.Thread(target=self._run, name=f"nri-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            conn = self._conn
        if conn is not None:
            conn.close("plugin stopping")
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def wait_synchronized(self, timeout: float) -> bool:
        """True once a Synchronize was answered on the current connection."""
        return self._synced.wait(timeout)

    def status(self) -> Status:
        with self._lock:
            return Status(**{k: getattr(self._status, k) for k in Status.__dataclass_fields__})

    @property
    def request_timeout(self) -> float:
        return self._request_timeout

    def update_containers(
        self, updates: Sequence[api.ContainerUpdate], timeout: float | None = None
    ) -> list[api.ContainerUpdate]:
        """Ask the runtime to change running containers; returns the updates it reports as
        failed. Raises ConnectionError when not connected, RpcError when the runtime answers
        with an error (containerd does when any update failed, without saying which)."""
        with self._lock:
            conn = self._conn if self._status.state is State.SYNCHRONIZED else None
        if conn is None:
            raise ConnectionError("NRI: not connected to the runtime")
        reply = conn.call(
            RUNTIME_SERVICE,
            "UpdateContainers",
            api.UpdateContainersRequest(update=list(updates)),
            api.UpdateContainersResponse,
            timeout if timeout is not None else max(self._request_timeout, 5.0),
        )
        return list(reply.failed)

    # --- connect loop -------------------------------------------------------------------------

    def _set(self, **changes: Any) -> None:
        with self._lock:
            for k, v in changes.items():
                setattr(self._status, k, v)
            self._status.since = time.time()

    def _run(self) -> None:
        quiet_errors: set[str] = set()
        while not self._stop.is_set():
            try:
                conn = nriconn.Connection.dial(self.socket_path, self._dispatch, name=self.name)
            except OSError as e:
                message = f"cannot connect to {self.socket_path}: {e.strerror or e}"
                if message not in quiet_errors:  # said once per distinct reason, not every retry
                    quiet_errors.add(message)
                    self._log.warning(f"NRI: {message}; retrying every {self.retry_interval:g} s")
                self._set(state=State.CONNECTING, last_error=message)
                self._stop.wait(self.retry_interval)
                continue
            quiet_errors.clear()
            reason = self._serve(conn)
            self._set(state=State.CONNECTING, last_error=reason)
            try:
                self.handler.disconnected(reason)
            except Exception:
                self._log.exception("NRI: handler failed on disconnect")
            if not self._stop.is_set():
                self._log.warning(f"NRI: connection lost ({reason}); reconnecting")
                self._stop.wait(min(1.0, self.retry_interval))

    def _serve(self, conn: nriconn.Connection) -> str:
        self._synced.clear()
        self._sync_parts = []
        with self._lock:
            self._conn = conn
            self._status.state = State.REGISTERING
        conn.start()
        try:
            conn.call(
                RUNTIME_SERVICE,
                "RegisterPlugin",
                api.RegisterPluginRequest(
                    plugin_name=self.name, plugin_idx=self.index, NRI_version=NRI_VERSION
                ),
                api.Empty,
                DEFAULT_REGISTRATION_TIMEOUT,
            )
            synced = self._synced.wait(DEFAULT_REGISTRATION_TIMEOUT + DEFAULT_REQUEST_TIMEOUT)
            if not synced and not conn.closed.is_set():
                conn.close("the runtime did not configure and synchronize the plugin in time")
            while not conn.closed.wait(1.0):
                if self._stop.is_set():
                    conn.close("plugin stopping")
        except (nriconn.RpcError, ConnectionError, TimeoutError) as e:
            conn.close(f"registration failed: {e}")
        conn.join(5)
        with self._lock:
            self._conn = None
        return conn.close_reason

    # --- the Plugin service -------------------------------------------------------------------

    def _dispatch(self, service: str, method: str, payload: bytes) -> bytes:
        call = self._calls.get(method) if service == PLUGIN_SERVICE else None
        if call is None:
            raise nriconn.RpcError(nriconn.UNIMPLEMENTED, f"{service}/{method} is not implemented")
        request = call.request()
        request.ParseFromString(payload)
        started = time.monotonic()
        answer = call.run(request)
        took = time.monotonic() - started
        if took > self._request_timeout / 2:
            self._log.warning(
                f"NRI: {method} took {took * 1000:.0f} ms of the runtime's "
                f"{self._request_timeout * 1000:.0f} ms request timeout"
            )
        return answer.SerializeToString()

    def _configure(self, request: api.ConfigureRequest) -> api.ConfigureResponse:
        if request.request_timeout > 0:
            self._request_timeout = request.request_timeout / 1000
        info = RuntimeInfo(
            name=request.runtime_name,
            version=request.runtime_version,
            nri_version=request.NRI_version,
            request_timeout=self._request_timeout,
            registration_timeout=(request.registration_timeout or 5000) / 1000,
        )
        self._set(runtime=f"{info.name} {info.version}".strip())
        self._log.info(
            "NRI: configured by the runtime",
            runtime=info.name,
            runtime_version=info.version,
            nri_version=info.nri_version,
            request_timeout_ms=request.request_timeout,
        )
        self.handler.connected(info)
        # 0 would mean "every event": a handler that wants none still names one it ignores.
        return api.ConfigureResponse(events=self._mask or 1 << (api.REMOVE_CONTAINER - 1))

    def _synchronize(self, request: api.SynchronizeRequest) -> api.SynchronizeResponse:
        self._sync_parts.append(request)
        count = sum(len(p.pods) + len(p.containers) for p in self._sync_parts)
        if count > MAX_SYNC_OBJECTS:
            self._sync_parts = []
            raise nriconn.RpcError(
                nriconn.INTERNAL, f"synchronize holds more than {MAX_SYNC_OBJECTS} objects"
            )
        if request.more:
            return api.SynchronizeResponse(more=True)
        parts, self._sync_parts = self._sync_parts, []
        pods = [p for part in parts for p in part.pods]
        containers = [c for part in parts for c in part.containers]
        updates = self.handler.synchronize(pods, containers)
        with self._lock:
            self._status.state = State.SYNCHRONIZED
            self._status.synchronizations += 1
            self._status.last_error = ""
        self._synced.set()
        self._log.info("NRI: synchronized", pods=len(pods), containers=len(containers), updates=len(updates))
        return api.SynchronizeResponse(update=list(updates), more=False)

    def _shutdown(self, request: api.Empty) -> api.Empty:
        self._log.info("NRI: the runtime is shutting down")
        return api.Empty()

    def _container_event(self, event: int, response: type[ProtoMessage]) -> Callable[[Any], ProtoMessage]:
        def run(request: Any) -> ProtoMessage:
            if self._wants(event):
                self.handler.container_event(event, request.pod, request.container)
            return response()

        return run

    def _pod_event(self, event: int, response: type[ProtoMessage]) -> Callable[[Any], ProtoMessage]:
        def run(request: Any) -> ProtoMessage:
            if self._wants(event):
                self.handler.pod_event(event, request.pod)
            return response()

        return run

    def _state_change(self, request: api.StateChangeEvent) -> api.Empty:
        if self._wants(request.event):
            if request.HasField("container"):
                self.handler.container_event(request.event, request.pod, request.container)
            else:
                self.handler.pod_event(request.event, request.pod)
        return api.Empty()

    def _wants(self, event: int) -> bool:
        return bool(self._mask & (1 << (event - 1))) if api.UNKNOWN < event < api.LAST else False
