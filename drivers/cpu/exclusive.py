"""Claimed CPUs exclusive on the whole node, through the runtime's NRI (common/nri).

The CDI hook (pinning.py) pins a claim's own containers, but every other container keeps running
on all CPUs, the claimed ones included. Here the driver is an NRI plugin:

- CreateContainer: a container that uses our CPU devices gets exactly its claims' CPUs (and
  their memory nodes with `--cpu-pin-memory auto`), every other container the shared pool
  (pool.py decides, from the container's CDI devices and the driver's holdings);
- prepare/unprepare change the holdings: `changed()` recomputes every known container and asks
  the runtime to update those that differ, so the pool shrinks before a prepare returns to the
  kubelet (the claim's container starts after that) and grows back after an unprepare;
- Synchronize (every connect: driver restart, runtime restart, a timeout that cost us the
  connection) tells us every container; the same reconciliation then corrects those started
  while we were away, which the runtime ran unadjusted;
- PostCreateContainer reports what the runtime really created: a container whose
  CreateContainer was answered just before a prepare changed the pool is corrected then;
  UpdateContainer (the kubelet resizing a container) keeps our cpuset; Stop/RemoveContainer
  forget the container.

Updates happen on the reconciler thread, never inside a handler (the runtime holds its lock
while a handler runs: see common/nri/plugin.py). Failed updates are retried with a backoff as
long as the container exists.

The plugin's name is the driver's name whatever the instance: during a surge update two driver
pods are connected at once, and the runtime refuses a container whose cpuset two plugins of
different names set, while the same name counts as one owner (both answer the same).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter, Gauge
from topodra.common import logs
from topodra.common.nri import conn as nriconn
from topodra.common.nri.plugin import Handler, NriPlugin, RuntimeInfo, State
from topodra.drivers.cpu import pool
from topodra.drivers.cpu.holdings import Holding
from topodra.drivers.cpu.policy import fmt
from topodra.proto.nri.v1alpha1 import api_pb2 as api

MODES = ("nri", "hook", "none")
RETRY_FIRST = 1.0  # seconds before retrying a failed update, doubling up to RETRY_MAX
RETRY_MAX = 30.0
HOOK_ONLY_WARNING = (
    "claimed CPUs are exclusive only among claim holders: containers without a CPU claim may "
    "still run on them"
)

PINNING_MODE = Gauge(
    "topodra_cpu_pinning_mode",
    "1 for the mode claimed CPUs are pinned in now (nri: exclusive on the node; hook: exclusive "
    "among claim holders only; none: not pinned), 0 for the others.",
    ["driver", "mode"],
)
SHARED_POOL_CPUS = Gauge(
    "topodra_cpu_shared_pool_cpus", "CPUs of the shared pool (allowed minus claimed).", ["driver"]
)
NRI_UPDATES = Counter(
    "topodra_cpu_nri_container_updates",
    "Container cpuset updates asked of the runtime through NRI.",
    ["driver", "result"],  # result: ok | failed
)


@dataclass(slots=True)
class _Container:
    id: str
    pod: str  # namespace/name, for logs
    name: str
    use: pool.ClaimUse
    applied: str | None  # the cpuset the runtime has (as text); None: unknown
    applied_mems: str | None
    creating: bool  # CreateContainer answered, PostCreateContainer not seen yet
    failures: int = 0
    retry_at: float = 0.0


class Exclusivity(Handler):
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
        self,
        driver: str,
        holdings: Callable[[], Mapping[str, Sequence[Holding]]],
        allowed: Iterable[int],
        withheld: Iterable[int],
        *,
        cdi_kind: str,
        socket_path: str,
        pin_memory: bool,
        hook_path: str | None,
        retry_interval: float = 5.0,
    ) -> None:
        self.driver = driver
        self._holdings = holdings
        self._allowed = frozenset(allowed)
        self._withheld = frozenset(withheld)
        self._cdi_kind = cdi_kind
        self._pin_memory = pin_memory
        self._hook_path = hook_path
        self._log = logs.get("topodra.drivers.cpu.exclusive", driver=driver)
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._containers: dict[str, _Container] = {}
        self._pods: dict[str, str] = {}  # sandbox id -> namespace/name
        self._generation = 0  # bumped by every change the containers must follow
        self._settled = 0  # the generation every known container follows
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._runtime = ""
        self._pool: frozenset[int] = frozenset()
        self.plugin = NriPlugin(self, driver, socket_path, retry_interval=retry_interval)
        self._set_mode("hook")

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._reconcile_loop, name="cpu-nri-reconcile", daemon=True)
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

    def detail(self) -> dict[str, Any]:
        status = self.plugin.status()
        with self._lock:
            containers = len(self._containers)
            shared = fmt(self._pool) if self._pool else ""
        return {
            "nri": status.as_dict(),
            "containers": containers,
            "shared_pool": shared,
        }

    # --- what the driver calls ------------------------------------------------------------------

    def changed(self, wait: float) -> bool:
        """Holdings changed: bring every container in line. Waits up to `wait` seconds for the
        runtime to have applied it; True when it has (or when there is nothing to do)."""
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
        self._runtime = f"{runtime.name} {runtime.version}".strip()

    def disconnected(self, reason: str) -> None:
        with self._done:
            self._containers.clear()
            self._pods.clear()
            self._done.notify_all()
        self._set_mode("hook")
        self._log.warning(
            f"CPU pinning falls back to the CDI hook until NRI reconnects ({reason}): {HOOK_ONLY_WARNING}"
        )

    def synchronize(
        self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
    ) -> Sequence[api.ContainerUpdate]:
        known: dict[str, _Container] = {}
        names = {p.id: f"{p.namespace}/{p.name}" for p in pods}
        for c in containers:
            if c.state not in pool.LIVE_STATES:
                continue
            current = pool.current_cpus(c)
            known[c.id] = _Container(
                id=c.id,
                pod=names.get(c.pod_sandbox_id, c.pod_sandbox_id),
                name=c.name,
                use=pool.claim_use(c, self._cdi_kind, self._hook_path),
                applied=fmt(current) if current else None,
                applied_mems=c.linux.resources.cpu.mems or None,
                creating=False,
            )
        with self._lock:
            self._containers = known
            self._pods = names
            self._generation += 1
        self._set_mode("nri")
        self._log.info(
            f"CPU pinning mode nri ({self._runtime}): claimed CPUs are exclusive on this node, "
            "every container without a CPU claim runs on the shared pool",
            containers=len(known),
        )
        self._wake.set()
        return ()  # the reconciler sends the corrections, so failures are seen and retried

    def create_container(self, request: api.CreateContainerRequest) -> api.CreateContainerResponse:
        c, pod = request.container, request.pod
        use = pool.claim_use(c, self._cdi_kind, self._hook_path)
        table = self._table()
        assignment, unknown = pool.assign(use, table, self._pin_memory)
        entry = _Container(
            id=c.id,
            pod=f"{pod.namespace}/{pod.name}",
            name=c.name,
            use=use,
            applied=assignment.cpus_text(),
            applied_mems=assignment.mems_text() or None,
            creating=True,
        )
        with self._lock:
            self._containers[c.id] = entry
            self._pods[pod.id] = entry.pod
        self._log_assignment("container created", entry, assignment, unknown)
        return api.CreateContainerResponse(adjust=pool.adjustment(assignment))

    def container_event(self, event: int, pod: api.PodSandbox, container: api.Container) -> None:
        if event == api.REMOVE_CONTAINER:
            with self._lock:
                self._containers.pop(container.id, None)
            return
        if event != api.POST_CREATE_CONTAINER:
            return
        current = pool.current_cpus(container)
        with self._lock:
            entry = self._containers.get(container.id)
            if entry is None:  # created while we were reconnecting
                entry = _Container(
                    id=container.id,
                    pod=f"{pod.namespace}/{pod.name}",
                    name=container.name,
                    use=pool.claim_use(container, self._cdi_kind, self._hook_path),
                    applied=None,
                    applied_mems=None,
                    creating=False,
                )
                self._containers[container.id] = entry
            entry.creating = False
            entry.applied = fmt(current) if current else None
            entry.applied_mems = container.linux.resources.cpu.mems or None
            self._generation += 1
        self._wake.set()

    def update_container(self, request: api.UpdateContainerRequest) -> api.UpdateContainerResponse:
        with self._lock:
            entry = self._containers.get(request.container.id)
        if entry is None:
            return api.UpdateContainerResponse()
        assignment, _ = pool.assign(entry.use, self._table(), self._pin_memory)
        with self._lock:
            entry.applied = assignment.cpus_text()
            entry.applied_mems = assignment.mems_text() or None
        return api.UpdateContainerResponse(update=[pool.update(entry.id, assignment)])

    def stop_container(self, request: api.StopContainerRequest) -> api.StopContainerResponse:
        with self._lock:
            self._containers.pop(request.container.id, None)
        return api.StopContainerResponse()

    # --- reconciliation -----------------------------------------------------------------------

    def _table(self) -> pool.Table:
        return pool.Table.build(self._holdings(), self._allowed, self._withheld)

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
        table = self._table()
        self._pool = table.pool
        SHARED_POOL_CPUS.labels(self.driver).set(len(table.pool))
        if not self.active:
            return
        now = time.monotonic()
        todo: list[tuple[_Container, pool.Assignment]] = []
        waiting = False
        with self._lock:
            for entry in self._containers.values():
                assignment, _ = pool.assign(entry.use, table, self._pin_memory)
                if _follows(entry, assignment):
                    continue
                if entry.creating or entry.retry_at > now:
                    waiting = True
                    continue
                todo.append((entry, assignment))
        failed = self._send(todo)
        with self._done:
            for entry, assignment in todo:
                if entry.id in failed:
                    entry.failures += 1
                    entry.retry_at = time.monotonic() + min(
                        RETRY_MAX, RETRY_FIRST * 2 ** (entry.failures - 1)
                    )
                    waiting = True
                    continue
                entry.failures = 0
                entry.applied = assignment.cpus_text()
                entry.applied_mems = assignment.mems_text() or entry.applied_mems
                self._log_assignment("container updated", entry, assignment, ())
            if not waiting and generation > self._settled:
                self._settled = generation
                self._done.notify_all()
        # retries and creations still pending come back on the next pass (at least every second)

    def _send(self, todo: Sequence[tuple[_Container, pool.Assignment]]) -> set[str]:
        """Ask the runtime; the ids it could not update. One call first; when the runtime
        answers with an error (containerd does without saying which failed), one by one."""
        if not todo:
            return set()
        updates = [pool.update(entry.id, a) for entry, a in todo]
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
        NRI_UPDATES.labels(self.driver, "ok").inc(len(updates) - len(failed))
        NRI_UPDATES.labels(self.driver, "failed").inc(len(failed))
        return failed

    # --- reporting ------------------------------------------------------------------------------

    def _set_mode(self, mode: str) -> None:
        for m in MODES:
            PINNING_MODE.labels(self.driver, m).set(1 if m == mode else 0)

    def _log_assignment(
        self, what: str, entry: _Container, assignment: pool.Assignment, unknown: Sequence[str]
    ) -> None:
        fields: dict[str, Any] = {
            "container": entry.name,
            "container_id": entry.id,
            "pod": entry.pod,
            "cpus": assignment.cpus_text(),
        }
        if assignment.claims:
            fields["claims"] = list(assignment.claims)
            if assignment.mems:
                fields["mems"] = assignment.mems_text()
        where = f"claim CPUs {assignment.cpus_text()}" if assignment.claims else "the shared pool"
        self._log.info(f"{what}: {entry.pod}/{entry.name} runs on {where}", **fields)
        if unknown:
            self._log.warning(
                f"{entry.pod}/{entry.name} uses CPU devices of claims this driver does not hold "
                f"({', '.join(unknown)}): it runs on the shared pool",
                **fields,
            )


def _follows(entry: _Container, a: pool.Assignment) -> bool:
    if entry.applied != a.cpus_text():
        return False
    return not a.mems or entry.applied_mems == a.mems_text()
