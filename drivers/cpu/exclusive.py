"""Claimed CPUs exclusive on the whole node, through the runtime's NRI (common/nri).

The CDI hook (pinning.py) pins a claim's own containers, but every other container keeps running
on all CPUs, the claimed ones included. Here the driver is an NRI plugin whose policy is:

- a container that uses our CPU devices gets exactly its claims' CPUs (and their memory nodes
  with `--cpu-pin-memory auto`), every other container the shared pool (pool.py decides, from
  the container's CDI devices and the driver's holdings);
- prepare/unprepare change the holdings: `changed()` brings every known container in line, so
  the pool shrinks before a prepare returns to the kubelet (the claim's container starts after
  that) and grows back after an unprepare.

Keeping containers in line with the policy (events, Synchronize after every connect, updates on
a thread of their own, retries) is common/nri/follower.py's.

A cpuset in a request that differs from our answer was chosen by someone else: the kubelet's CPU
manager with policy `static` gives every container one (its own exclusive CPUs to Guaranteed
containers, the rest of the node to the others) and re-sends them as updates. Our answer replaces
it, so claimed CPUs stay exclusive, but the kubelet's Guaranteed containers lose theirs without a
word. That is a node set up against the driver's requirement (the kubelet's CPU manager `none`,
docs/user/troubleshooting.md), so it is logged once per container with the cure, counted in
`topodra_cpu_foreign_cpusets` and shown in /readyz. A cpuset equal to our answer is not reported:
during a surge update it is the other instance's answer, and from a static kubelet it changes
nothing (until a claim or a Guaranteed container makes the two differ).

The plugin's name is the driver's name whatever the instance: during a surge update two driver
pods are connected at once, and the runtime refuses a container whose cpuset two plugins of
different names set, while the same name counts as one owner (both answer the same).
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from prometheus_client import Counter, Gauge
from topodra.common import logs
from topodra.common.nri.follower import Follower, Tracked
from topodra.common.nri.plugin import State
from topodra.common.topology.parse import parse_cpulist
from topodra.drivers.cpu import pool
from topodra.drivers.cpu.holdings import Holding
from topodra.drivers.cpu.pinning import HOOK_ONLY_WARNING
from topodra.drivers.cpu.policy import fmt
from topodra.proto.nri.v1alpha1 import api_pb2 as api

MODES = ("nri", "hook", "none")

PINNING_MODE = Gauge(
    "topodra_cpu_pinning_mode",
    "1 for the mode claimed CPUs are pinned in now (nri: exclusive on the node; hook: exclusive "
    "among claim holders only; none: not pinned), 0 for the others.",
    ["driver", "mode"],
)
SHARED_POOL_CPUS = Gauge(
    "topodra_cpu_shared_pool_cpus", "CPUs of the shared pool (allowed minus claimed).", ["driver"]
)
FOREIGN_CPUSETS = Counter(
    "topodra_cpu_foreign_cpusets",
    "Container creations and updates that arrived with a cpuset someone else chose (the kubelet's "
    "CPU manager policy static, or another NRI plugin); topodra's pinning replaced it.",
    ["driver", "event"],  # event: create | update
)
FOREIGN_ADVICE = (
    "the kubelet's CPU manager policy is static (or another NRI plugin pins CPUs): topodra's "
    "pinning replaces its cpusets, so its Guaranteed containers lose their exclusive CPUs; set "
    "cpuManagerPolicy: none on this node (and delete its cpu_manager_state), or run the CPU "
    "driver with --cpu-pinning none to leave pinning to the kubelet"
)
MAX_FOREIGN_NAMED = 4096  # containers remembered as told; the oldest is forgotten first
NRI_UPDATES = Counter(
    "topodra_cpu_nri_container_updates",
    "Container cpuset updates asked of the runtime through NRI.",
    ["driver", "result"],  # result: ok | failed
)


class Exclusivity(Follower[pool.ClaimUse, pool.Table, pool.Assignment]):
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
        self._pool: frozenset[int] = frozenset()
        self._foreign_lock = threading.Lock()
        self._foreign_named: dict[tuple[str, str], None] = {}  # insertion order: oldest first
        self._foreign_count = 0
        self._foreign_last: dict[str, str] = {}
        log = logs.get("topodra.drivers.cpu.exclusive", driver=driver)
        super().__init__(driver, socket_path, log, thread="cpu-nri-reconcile", retry_interval=retry_interval)
        self._set_mode("hook")

    def detail(self) -> dict[str, Any]:
        pool_now = self._pool
        out: dict[str, Any] = {
            "nri": self.plugin.status().as_dict(),
            "containers": self.tracked(),
            "shared_pool": fmt(pool_now) if pool_now else "",
        }
        with self._foreign_lock:
            if self._foreign_count:
                out["foreign_cpusets"] = {
                    "count": self._foreign_count,
                    "last": dict(self._foreign_last),
                    "advice": FOREIGN_ADVICE,
                }
        return out

    def using(self, claim_uid: str) -> list[str] | None:
        """namespace/pod/container of each live container that uses the claim's CPU devices (by
        the CDI names the kubelet gave it, which a pod cannot choose). None when that cannot be
        known: the runtime was connected and is away now (a containerd restart), so containers
        it runs are not listed. Empty when it never connected (the hook pins, nothing is seen)."""
        status = self.plugin.status()
        if status.state is not State.SYNCHRONIZED:
            return None if status.synchronizations else []
        prefix = f"{claim_uid}-"
        users = [c for c in self.containers() if any(n.startswith(prefix) for n in c.use.cdi_names)]
        return [f"{c.pod}/{c.name}" for c in users]

    # --- requests: someone else's cpuset is noticed ---------------------------------------------

    def requested(
        self, event: str, entry: Tracked[pool.ClaimUse], asked: api.LinuxResources, want: pool.Assignment
    ) -> None:
        cpus = asked.cpu.cpus
        if cpus and parse_cpulist(cpus) != want.cpus:  # unreadable text is nobody's answer of ours
            self._foreign(event, entry.pod, entry.name, cpus)

    def _foreign(self, event: str, pod: str, container: str, cpus: str) -> None:
        """Someone asked for other CPUs than ours. Not our own answer: during a surge update the
        other instance's answer arrives in the request, and it is the same as ours. Told once
        per pod and container name, so a container the kubelet restarts (a new id) is not told
        again."""
        FOREIGN_CPUSETS.labels(self.driver, event).inc()
        cpus = cpus[:256]  # the runtime's text, kept short for the log and /readyz
        at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        with self._foreign_lock:
            self._foreign_count += 1
            self._foreign_last = {"event": event, "pod": pod, "container": container, "cpus": cpus, "at": at}
            key = (pod, container)
            first = key not in self._foreign_named
            if first:
                if len(self._foreign_named) >= MAX_FOREIGN_NAMED:
                    del self._foreign_named[next(iter(self._foreign_named))]  # the oldest
                self._foreign_named[key] = None
        if first:
            self._log.warning(
                f"{pod}/{container} came with cpuset {cpus} chosen by someone else: {FOREIGN_ADVICE}",
                pod=pod,
                container=container,
                cpus=cpus,
                nri_event=event,
            )

    # --- the policy -----------------------------------------------------------------------------

    def use(self, container: api.Container) -> pool.ClaimUse:
        return pool.claim_use(container, self._cdi_kind, self._hook_path)

    def context(self) -> pool.Table:
        return pool.Table.build(self._holdings(), self._allowed, self._withheld)

    def want(self, use: pool.ClaimUse, context: pool.Table) -> tuple[pool.Assignment, Sequence[str]]:
        return pool.assign(use, context, self._pin_memory)

    def resources(self, want: pool.Assignment) -> api.LinuxResources:
        return pool.linux_cpu(want)

    def current(self, container: api.Container) -> api.LinuxResources:
        cpus = pool.current_cpus(container)
        mems = container.linux.resources.cpu.mems
        return api.LinuxResources(cpu=api.LinuxCPU(cpus=fmt(cpus) if cpus else "", mems=mems))

    # --- reporting ------------------------------------------------------------------------------

    def on_pass(self, context: pool.Table) -> None:
        self._pool = context.pool
        SHARED_POOL_CPUS.labels(self.driver).set(len(context.pool))

    def on_synchronized(self, containers: int) -> None:
        self._set_mode("nri")
        self._log.info(
            f"CPU pinning mode nri ({self.runtime}): claimed CPUs are exclusive on this node, "
            "every container without a CPU claim runs on the shared pool",
            containers=containers,
        )

    def on_disconnected(self, reason: str) -> None:
        self._set_mode("hook")
        self._log.warning(
            f"CPU pinning falls back to the CDI hook until NRI reconnects ({reason}): {HOOK_ONLY_WARNING}"
        )

    def on_sent(self, ok: int, failed: int) -> None:
        NRI_UPDATES.labels(self.driver, "ok").inc(ok)
        NRI_UPDATES.labels(self.driver, "failed").inc(failed)

    def _set_mode(self, mode: str) -> None:
        for m in MODES:
            PINNING_MODE.labels(self.driver, m).set(1 if m == mode else 0)

    def placed(
        self, what: str, entry: Tracked[pool.ClaimUse], want: pool.Assignment, unmatched: Sequence[str]
    ) -> None:
        fields: dict[str, Any] = {
            "container": entry.name,
            "container_id": entry.id,
            "pod": entry.pod,
            "cpus": want.cpus_text(),
        }
        if want.claims:
            fields["claims"] = list(want.claims)
            if want.mems:
                fields["mems"] = want.mems_text()
        where = f"claim CPUs {want.cpus_text()}" if want.claims else "the shared pool"
        self._log.info(f"{what}: {entry.pod}/{entry.name} runs on {where}", **fields)
        if unmatched:
            self._log.warning(
                f"{entry.pod}/{entry.name} uses CPU devices of claims this driver does not hold "
                f"({', '.join(unmatched)}): it runs on the shared pool",
                **fields,
            )
