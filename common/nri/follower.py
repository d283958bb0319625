"""Keep every container of the runtime at the resources a driver's policy wants, through NRI.

A driver says, in a subclass of `Follower`, what a container uses of its resources (fixed at the
container's creation), where the container should run given the driver's state now, and how
that reads as `LinuxResources`. Everything else is here, so that no policy has to get it right
again:

- CreateContainer answers with the policy's resources; Synchronize (every connect: driver
  restart, runtime restart, a timeout that cost the connection) tells every live container, and
  the same reconciliation then corrects those started while the driver was away, which the
  runtime ran unadjusted; PostCreateContainer reports what the runtime really created (a
  container answered just before the driver's state changed is corrected then); UpdateContainer
  (the kubelet resizing a container) keeps the policy's resources; Stop/RemoveContainer forget it;
- `changed()` (the driver's state moved) recomputes every known container and asks the runtime
  to update those that differ, and can wait until it has.

Updates happen on the reconciler thread, never inside a handler (the runtime holds its lock
while a handler runs: see plugin.py). Failed updates are retried with a backoff as long as the
container exists.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from topodra.common import logs
from topodra.common.nri import conn as nriconn
from topodra.common.nri.plugin import Handler, NriPlugin, RuntimeInfo, State
from topodra.proto.nri.v1alpha1 import api_pb2 as api

LIVE_STATES = (api.CONTAINER_CREATED, api.CONTAINER_RUNNING, api.CONTAINER_PAUSED)
RETRY_FIRST = 1.0  # seconds before retrying a failed update, doubling up to RETRY_MAX
RETRY_MAX = 30.0

U = TypeVar("U")  # what a container uses of the driver's resources
C = TypeVar("C")  # the driver's state for one pass over the containers
W = TypeVar("W")  # where one container should run


@dataclass(slots=True)
class Tracked(Generic[U]):
    """A container the runtime told us about."""

    id: str
    pod: str  # namespace/name, for logs
    name: str
    use: U
    applied: api.LinuxResources  # what the runtime has, as far as we know
    creating: bool  # CreateContainer answered, PostCreateContainer not seen yet
    failures: int = 0
    retry_at: float = 0.0


class Follower(Handler, ABC, Generic[U, C, W]):
    events = frozenset(
        {
            api.CREATE_CONTAINER,
            api.POST_CREATE_CONTAINER,
            api.UPDATE_CONTAINER,
            api.STOP_CONTAINER,
            api.REMOVE_CONTAINER,
        }
    )

    def __init__(
        self, name: str, socket_path: str, log: logs.Logger, *, thread: str, retry_interval: float
    ) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._containers: dict[str, Tracked[U]] = {}
        self._generation = 0  # bumped by every change the containers must follow
        self._settled = 0  # the generation every known container follows
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread_name = thread
        self._thread: threading.Thread | None = None
        self.runtime = ""  # "containerd v2.4.2" once connected
        self.plugin = NriPlugin(self, name, socket_path, retry_interval=retry_interval)

    # --- the policy (the driver's) ------------------------------------------------------------

    @abstractmethod
    def use(self, container: api.Container) -> U:
        """What the container uses of the driver's resources, read once, at its creation."""

    @abstractmethod
    def context(self) -> C:
        """The driver's state, read once per pass over the containers."""

    @abstractmethod
    def want(self, use: U, context: C) -> tuple[W, Sequence[str]]:
        """Where the container should run, and what of its use matched nothing (for the log)."""

    @abstractmethod
    def resources(self, want: W) -> api.LinuxResources:
        """`want` as the runtime takes it; fields left unset are left alone."""

    @abstractmethod
    def current(self, container: api.Container) -> api.LinuxResources:
        """What the runtime's spec gives the container now, spelt as `resources` spells it."""

    def placed(self, what: str, entry: Tracked[U], want: W, unmatched: Sequence[str]) -> None:
        """A container was created or updated to `want` (for the log)."""

    def requested(self, event: str, entry: Tracked[U], asked: api.LinuxResources, want: W) -> None:
        """A CreateContainer ("create") or UpdateContainer ("update") request came with `asked`,
        which the answer `want` replaces: what the kubelet or an earlier plugin chose (for a
        policy that tells the node's operator when that was not its own choice)."""

    def on_pass(self, context: C) -> None:
        """A reconciliation pass starts with `context`, connected or not (for gauges)."""

    def on_synchronized(self, containers: int) -> None:
        """The runtime told every container: from now on they follow the policy."""

    def on_disconnected(self, reason: str) -> None:
        """The connection is gone; nothing follows the policy until it is back."""

    def on_sent(self, ok: int, failed: int) -> None:
        """Updates asked of the runtime, and how many of them failed (for counters)."""

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._reconcile_loop, name=self._thread_name, daemon=True)
        self._thread.start()
        self.plugin.start()

    def stop(self) -> None:
        self.plugin.stop()
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    @property
    def active(self) -> bool:
        return self.plugin.status().state is State.SYNCHRONIZED

    def tracked(self) -> int:
        with self._lock:
            return len(self._containers)

    def containers(self) -> list[Tracked[U]]:
        """The containers the runtime told us about, now (a copy of the list)."""
        with self._lock:
            return list(self._containers.values())

    def changed(self, wait: float) -> bool:
        """The driver's state changed: bring every container in line. Waits up to `wait`
        seconds for the runtime to have applied it; True when it has (or when there is nothing
        to do)."""
        with self._lock:
            self._generation += 1
            mine = self._generation
        self._wake.set()
        if not self.active or wait <= 0:
            return not self.active
        deadline = time.monotonic() + wait
        with self._done:
            while self._settled < mine and self.active:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._done.wait(left)
        return True

    # --- NRI events (runtime threads; must answer well inside the request timeout) ------------

    def connected(self, runtime: RuntimeInfo) -> None:
        self.runtime = f"{runtime.name} {runtime.version}".strip()

    def disconnected(self, reason: str) -> None:
        with self._done:
            self._containers.clear()
            self._done.notify_all()
        self.on_disconnected(reason)

    def synchronize(
        self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
    ) -> Sequence[api.ContainerUpdate]:
        names = {p.id: f"{p.namespace}/{p.name}" for p in pods}
        known = {
            c.id: Tracked(
                id=c.id,
                pod=names.get(c.pod_sandbox_id, c.pod_sandbox_id),
                name=c.name,
                use=self.use(c),
                applied=self.current(c),
                creating=False,
            )
            for c in containers
            if c.state in LIVE_STATES
        }
        with self._lock:
            self._containers = known
            self._generation += 1
        self.on_synchronized(len(known))
        self._wake.set()
        return ()  # the reconciler sends the corrections, so failures are seen and retried

    def create_container(self, request: api.CreateContainerRequest) -> api.CreateContainerResponse:
        c, pod = request.container, request.pod
        use = self.use(c)
        want, unmatched = self.want(use, self.context())
        resources = self.resources(want)
        entry = Tracked(
            id=c.id, pod=f"{pod.namespace}/{pod.name}", name=c.name, use=use, applied=resources, creating=True
        )
        with self._lock:
            self._containers[c.id] = entry
        self.placed("container created", entry, want, unmatched)
        self.requested("create", entry, c.linux.resources, want)
        return api.CreateContainerResponse(
            adjust=api.ContainerAdjustment(linux=api.LinuxContainerAdjustment(resources=resources))
        )

    def container_event(self, event: int, pod: api.PodSandbox, container: api.Container) -> None:
        if event == api.REMOVE_CONTAINER:
            with self._lock:
                self._containers.pop(container.id, None)
            return
        if event != api.POST_CREATE_CONTAINER:
            return
        current = self.current(container)
        with self._lock:
            entry = self._containers.get(container.id)
            if entry is None:  # created while we were reconnecting
                entry = Tracked(
                    id=container.id,
                    pod=f"{pod.namespace}/{pod.name}",
                    name=container.name,
                    use=self.use(container),
                    applied=current,
                    creating=False,
                )
                self._containers[container.id] = entry
            entry.creating = False
            entry.applied = current
            self._generation += 1
        self._wake.set()

    def update_container(self, request: api.UpdateContainerRequest) -> api.UpdateContainerResponse:
        with self._lock:
            entry = self._containers.get(request.container.id)
        if entry is None:
            return api.UpdateContainerResponse()
        want, _ = self.want(entry.use, self.context())
        resources = self.resources(want)
        with self._lock:
            entry.applied = resources
        self.requested("update", entry, request.linux_resources, want)
        return api.UpdateContainerResponse(update=[_update(entry.id, resources)])

    def stop_container(self, request: api.StopContainerRequest) -> api.StopContainerResponse:
        with self._lock:
            self._containers.pop(request.container.id, None)
        return api.StopContainerResponse()

    # --- reconciliation -----------------------------------------------------------------------

    def _reconcile_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(RETRY_FIRST)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._reconcile()
            except Exception:
                self._log.exception("NRI reconciliation failed")

    def _reconcile(self) -> None:
        with self._lock:
            generation = self._generation
        context = self.context()
        self.on_pass(context)
        if not self.active:
            return
        now = time.monotonic()
        todo: list[tuple[Tracked[U], W, api.LinuxResources]] = []
        waiting = False
        with self._lock:
            for entry in self._containers.values():
                want, _ = self.want(entry.use, context)
                resources = self.resources(want)
                if covers(entry.applied, resources):
                    continue
                if entry.creating or entry.retry_at > now:
                    waiting = True
                    continue
                todo.append((entry, want, resources))
        failed = self._send([(entry.id, resources) for entry, _, resources in todo])
        with self._done:
            for entry, want, resources in todo:
                if entry.id in failed:
                    entry.failures += 1
                    entry.retry_at = time.monotonic() + min(
                        RETRY_MAX, RETRY_FIRST * 2 ** (entry.failures - 1)
                    )
                    waiting = True
                    continue
                entry.failures = 0
                entry.applied.MergeFrom(resources)
                self.placed("container updated", entry, want, ())
            if not waiting and generation > self._settled:
                self._settled = generation
                self._done.notify_all()
        # retries and creations still pending come back on the next pass (at least every second)

    def _send(self, todo: Sequence[tuple[str, api.LinuxResources]]) -> set[str]:
        """Ask the runtime; the ids it could not update. One call first; when the runtime
        answers with an error (containerd does without saying which failed), one by one."""
        if not todo:
            return set()
        updates = [_update(container_id, resources) for container_id, resources in todo]
        try:
            failed = {u.container_id for u in self.plugin.update_containers(updates)}
        except nriconn.RpcError:
            failed = set()
            for u in updates:
                try:
                    failed.update(f.container_id for f in self.plugin.update_containers([u]))
                except (nriconn.RpcError, ConnectionError, TimeoutError) as e:
                    self._log.warning(f"NRI: update of container {u.container_id} failed: {e}")
                    failed.add(u.container_id)
        except (ConnectionError, TimeoutError) as e:
            self._log.warning(f"NRI: container updates not sent: {e}")
            failed = {u.container_id for u in updates}
        self.on_sent(len(updates) - len(failed), len(failed))
        return failed


def covers(have: Message, want: Message) -> bool:
    """Every field that `want` sets has the same value in `have` (what `want` leaves unset,
    the runtime keeps: cpuset.mems when a policy does not restrict memory)."""
    for field, value in want.ListFields():
        mine = getattr(have, field.name)
        if field.type == FieldDescriptor.TYPE_MESSAGE and not field.is_repeated:
            if not covers(mine, value):
                return False
        elif mine != value:
            return False
    return True


def _update(container_id: str, resources: api.LinuxResources) -> api.ContainerUpdate:
    return api.ContainerUpdate(container_id=container_id, linux=api.LinuxContainerUpdate(resources=resources))
