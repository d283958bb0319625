"""The side-effect half of the placement study: machines, nodes, slices, submission, watches.

Simulated nodes: Node objects made Ready through the API (no kubelet). Their ResourceSlices are
built by the real drivers' own device builders and the publisher's pure slice builder
(`build_desired`: validation, chunking, naming) and created by the admin, one pool per driver
and node: the same objects `topodra serve` would write, without running 3 driver processes per
node. The real kube-scheduler allocates every claim.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import tarfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from hack.bench.inventory import Machine, machine_from_slices
from hack.bench.metrics import Placement, Timing, placement_from_results
from hack.bench.workload import Job, claim_body, pod_body

log = logging.getLogger("bench.placement")

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO.parent / "shared" / "fixtures" / "sysfs"
DEVICE_CLASSES = REPO / "deploy" / "base" / "deviceclasses.yaml"
MACHINE_LABEL = "bench.topodra.io/machine"

# A captured real machine: 2 sockets, 8 NEC vector engines on two PCIe switches (4 each) with
# one InfiniBand NIC per switch, plus a dual-port Ethernet NIC on a third switch.
CAPTURED_8ACC = "hwloc--32intel64-2p8co2t+8ve"


@dataclass(frozen=True, slots=True)
class MachineType:
    kind: str  # "synth:<spec>" or "captured:<fixture>"
    count: int
    short: str  # node name prefix


def sysfs_root(kind: str, work: Path) -> Path:
    """Writes (synthetic) or unpacks (captured) the machine's tree under `work`."""
    source, _, name = kind.partition(":")
    dest = work / name
    if dest.exists():
        return dest
    if source == "synth":
        from topodra.common.synth import build, load_spec

        build(load_spec(name), dest)
    elif source == "captured":
        archive = FIXTURES / f"{name}.tar.xz"
        if not archive.is_file():
            raise FileNotFoundError(f"captured machine {name}: no {archive}")
        dest.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="tar")
    else:
        raise ValueError(f"machine kind {kind!r}: expected synth:<spec> or captured:<fixture>")
    return dest


@dataclass(frozen=True, slots=True)
class DriverDevices:
    driver: str
    devices: tuple[Any, ...]


def driver_devices(root: Path) -> list[DriverDevices]:
    """Every driver's devices for the tree, built as `topodra slices` builds them (default flags)."""
    from topodra.common.inventory import Inventory
    from topodra.drivers import registry

    parser = argparse.ArgumentParser()
    registry.add_arguments(parser, list(registry.KINDS))
    args = parser.parse_args([])
    out = []
    for kind in registry.KINDS:
        driver = registry.create(kind, registry.CommonOptions(sysfs_root=root, node_name="bench", args=args))
        out.append(DriverDevices(driver.name, Inventory(driver).refresh().devices))
    return out


def node_slices(node: str, uid: str, drivers: Sequence[DriverDevices]) -> list[dict[str, Any]]:
    from topodra.common.publisher.build import build_desired

    slices: list[dict[str, Any]] = []
    for d in drivers:
        desired = build_desired(d.driver, node, uid, d.devices)
        for p in desired.problems:
            log.warning("node %s driver %s: validation left out: %s", node, d.driver, p)
        slices += desired.slices
    return slices


@dataclass
class Cluster:
    nodes: dict[str, Machine]  # node name -> what its slices hold
    kinds: dict[str, str]  # node name -> machine kind
    slices_created: int


def build_cluster(cp: Any, types: Sequence[MachineType], work: Path) -> Cluster:
    from tests.controlplane.cluster import api_resource

    dyn = cp.dynamic
    cp.apply_manifests([DEVICE_CLASSES])
    slices_api = api_resource(dyn, "ResourceSlice")
    nodes: dict[str, Machine] = {}
    kinds: dict[str, str] = {}
    bodies: list[dict[str, Any]] = []
    for t in types:
        drivers = driver_devices(sysfs_root(t.kind, work))
        for i in range(t.count):
            name = f"{t.short}-{i:02d}"
            uid = cp.create_node(name, labels={MACHINE_LABEL: t.short})
            made = node_slices(name, uid, drivers)
            nodes[name] = machine_from_slices(t.kind, made)
            kinds[name] = t.kind
            bodies += made
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda b: slices_api.create(body=b), bodies))
    return Cluster(nodes, kinds, len(bodies))


# ----- watching pods and claims -----------------------------------------------------------


@dataclass
class Observed:
    """What the watches saw, keyed by job (pod and claim share the job's name)."""

    created: dict[str, float] = field(default_factory=dict)
    names: set[tuple[str, str]] = field(default_factory=set)  # (kind, name) of every object seen
    bound: dict[str, tuple[float, str]] = field(default_factory=dict)
    allocated: dict[str, tuple[float, list[dict[str, Any]]]] = field(default_factory=dict)
    unschedulable: dict[str, tuple[float, str]] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)


# The scheduler's verdict when the DRA allocator finds no devices on any node. Other reasons
# (e.g. its informer has not seen the just-created claim yet) are retried by the scheduler.
NO_DEVICES = "cannot allocate all claims"
# The allocator gave up on a node (DRASchedulerFilterTimeout): no proof that the job cannot fit.
ALLOCATOR_TIMEOUT = "timed out trying to allocate devices"


class Watcher:
    def __init__(self, cp: Any, namespace: str, seen: Observed) -> None:
        from tests.controlplane.cluster import dynamic_client

        self._cp, self._ns, self._seen = cp, namespace, seen
        # discovery happens here, before the clock of any job starts
        self._dyn = {kind: dynamic_client(cp.api_client()) for kind in ("Pod", "ResourceClaim")}
        self._stop = threading.Event()
        self._watches: list[watch.Watch] = []
        self._threads = [
            threading.Thread(target=self._run, args=(self._pods,), daemon=True, name="watch-pods"),
            threading.Thread(target=self._run, args=(self._claims,), daemon=True, name="watch-claims"),
        ]

    def __enter__(self) -> Watcher:
        for t in self._threads:
            t.start()
        try:
            self._wait_open()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_open(self, timeout: float = 60.0) -> None:
        """Returns once both watches deliver events: a probe pod and claim must be seen by them.

        The probe claim is never used (no pod names it); the probe pod asks for nothing, so it is
        bound to some node and then force-deleted.
        """
        from tests.controlplane.cluster import api_resource

        pods = api_resource(self._dyn["Pod"], "Pod", "v1")
        claims = api_resource(self._dyn["ResourceClaim"], "ResourceClaim")
        probe = (
            f"watch-probe-{threading.get_ident() % 100000:05d}-{int(time.monotonic() * 1000) % 100000:05d}"
        )
        request = {"name": "probe", "exactly": {"deviceClassName": "cpu.topodra.io"}}
        claim = {"metadata": {"name": probe}, "spec": {"devices": {"requests": [request]}}}
        claims.create(body=claim, namespace=self._ns)
        body = {
            "metadata": {"name": probe},
            "spec": {"containers": [{"name": "probe", "image": "topodra.invalid/probe"}]},
        }
        pods.create(body=body, namespace=self._ns)
        want = {("Pod", probe), ("ResourceClaim", probe)}
        with self._seen.changed:
            if not self._seen.changed.wait_for(lambda: want <= self._seen.names, timeout):
                raise TimeoutError(f"{self._ns}: watches saw no probe objects in {timeout:.0f} s")
        _delete_job(self._cp, self._ns, probe)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for w in self._watches:
            w.stop()  # type: ignore[no-untyped-call]

    def _run(self, fn: Any) -> None:
        while not self._stop.is_set():
            try:
                fn()
            except Exception as err:  # a dropped watch is restarted; events are idempotent
                if not self._stop.is_set():
                    log.warning("watch restarted: %s", err)
                    time.sleep(0.2)

    def _stream(self, kind: str, api_version: str) -> Iterator[dict[str, Any]]:
        """Plain-dict events (the dynamic client), so no typed model has to know every field."""
        from tests.controlplane.cluster import api_resource

        dyn = self._dyn[kind]
        w = watch.Watch()  # type: ignore[no-untyped-call]
        self._watches.append(w)
        resource = api_resource(dyn, kind, api_version)
        events = dyn.watch(resource, namespace=self._ns, timeout=300, watcher=w)  # type: ignore[no-untyped-call]
        for ev in events:
            obj = ev["raw_object"]
            with self._seen.changed:
                self._seen.names.add((kind, obj["metadata"]["name"]))
                self._seen.changed.notify_all()
            yield {"type": ev["type"], "raw_object": obj}

    def _pods(self) -> None:
        for ev in self._stream("Pod", "v1"):
            now = time.monotonic()
            obj = ev["raw_object"]
            name = obj["metadata"]["name"]
            node = (obj.get("spec") or {}).get("nodeName")
            with self._seen.changed:
                if node and name not in self._seen.bound:
                    self._seen.bound[name] = (now, node)
                    self._seen.changed.notify_all()
                for c in (obj.get("status") or {}).get("conditions") or []:
                    if (
                        c.get("type") == "PodScheduled"
                        and c.get("status") == "False"
                        and any(m in (c.get("message") or "") for m in (NO_DEVICES, ALLOCATOR_TIMEOUT))
                        and name not in self._seen.unschedulable
                    ):
                        self._seen.unschedulable[name] = (now, c.get("message") or "")
                        self._seen.changed.notify_all()
            if self._stop.is_set():
                return

    def _claims(self) -> None:
        for ev in self._stream("ResourceClaim", "resource.k8s.io/v1"):
            now = time.monotonic()
            obj = ev["raw_object"]
            name = obj["metadata"]["name"]
            alloc = (obj.get("status") or {}).get("allocation")
            with self._seen.changed:
                if alloc and name not in self._seen.allocated:
                    self._seen.allocated[name] = (
                        now,
                        list((alloc.get("devices") or {}).get("results") or []),
                    )
                    self._seen.changed.notify_all()
            if self._stop.is_set():
                return


# ----- one scenario ------------------------------------------------------------------------


@dataclass
class ScenarioRun:
    scenario: str
    submitted: list[Job]
    placements: list[Placement]
    timing: Timing
    skipped: int  # jobs not submitted: a job no larger had already found no room
    seconds: float
    timed_out: list[str]  # jobs the allocator gave up on (not counted as "no room")


def make_namespace(cp: Any, name: str) -> None:
    core = k8s.CoreV1Api(cp.api_client())
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    deadline = time.monotonic() + 60
    while not core.list_namespaced_service_account(name).items:
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {name}: no default ServiceAccount after 60 s")
        time.sleep(0.1)


def _delete_job(cp: Any, ns: str, name: str) -> None:
    core = k8s.CoreV1Api(cp.api_client())
    res = k8s.ResourceV1Api(cp.api_client())
    with contextlib.suppress(ApiException):  # no kubelet: a bound pod only goes with grace 0
        core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    with contextlib.suppress(ApiException):
        res.delete_namespaced_resource_claim(name, ns)


def run_scenario(
    cp: Any, cluster: Cluster, scenario: str, jobs: Sequence[Job], namespace: str, *, timeout: float = 60.0
) -> ScenarioRun:
    """Submits jobs one at a time (claim, then pod) and waits for the scheduler's verdict.

    A job the scheduler cannot place is deleted, so it does not retry and slow later ones. Since
    devices are only ever taken, a job no smaller than one that found no room cannot fit either
    and is not submitted; the run stops once a 1-accelerator job found no room.
    """
    ns = namespace
    make_namespace(cp, ns)
    from tests.controlplane.cluster import api_resource

    dyn = cp.dynamic
    pods, claims = api_resource(dyn, "Pod", "v1"), api_resource(dyn, "ResourceClaim")
    seen = Observed()
    submitted: list[Job] = []
    failed_at: int | None = None
    skipped = 0
    timed_out: list[str] = []
    began = time.monotonic()
    with Watcher(cp, ns, seen):
        for job in jobs:
            if failed_at is not None and job.accelerators >= failed_at:
                skipped += 1
                continue
            claims.create(body=claim_body(job, scenario), namespace=ns)
            with seen.changed:
                seen.created[job.name] = time.monotonic()
            pods.create(body=pod_body(job), namespace=ns)
            submitted.append(job)

            def verdict(name: str = job.name) -> bool:
                return (name in seen.bound and name in seen.allocated) or name in seen.unschedulable

            with seen.changed:
                if not seen.changed.wait_for(verdict, timeout):
                    raise TimeoutError(f"{scenario} {job.name}: no scheduling verdict in {timeout:.0f} s")
                unschedulable = job.name in seen.unschedulable and job.name not in seen.bound
                message = seen.unschedulable.get(job.name, (0.0, ""))[1]
            if unschedulable and ALLOCATOR_TIMEOUT in message and NO_DEVICES not in message:
                timed_out.append(job.name)  # deleted, but larger jobs are still tried
                _delete_job(cp, ns, job.name)
                log.warning("%s: the allocator timed out on %s: %s", scenario, job.name, message)
            elif unschedulable:
                failed_at = job.accelerators if failed_at is None else min(failed_at, job.accelerators)
                _delete_job(cp, ns, job.name)
                log.info("%s: %s found no room", scenario, job.name)
                if failed_at == 1:
                    skipped += len(jobs) - jobs.index(job) - 1
                    break
    seconds = time.monotonic() - began
    timing = Timing()
    placements: list[Placement] = []
    for job in submitted:
        t0 = seen.created[job.name]
        if job.name in seen.bound and job.name in seen.allocated:
            t_bound, node = seen.bound[job.name]
            t_alloc, results = seen.allocated[job.name]
            timing.bound[job.name] = t_bound - t0
            timing.allocated[job.name] = t_alloc - t0
            placements.append(placement_from_results(job, node, cluster.nodes[node], results))
        elif job.name in seen.unschedulable and job.name not in timed_out:
            timing.unschedulable[job.name] = seen.unschedulable[job.name][0] - t0
    return ScenarioRun(scenario, submitted, placements, timing, skipped, seconds, timed_out)


def clear_namespace(cp: Any, ns: str, timeout: float = 120.0) -> None:
    """Deletes a run's pods and claims and waits until every claim is gone (devices free)."""
    core = k8s.CoreV1Api(cp.api_client())
    res = k8s.ResourceV1Api(cp.api_client())
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    res.delete_collection_namespaced_resource_claim(ns)
    deadline = time.monotonic() + timeout
    while res.list_namespaced_resource_claim(ns).items or core.list_namespaced_pod(ns).items:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{ns}: claims or pods still there after {timeout:.0f} s")
        time.sleep(0.2)


@contextlib.contextmanager
def control_plane() -> Iterator[Any]:
    from tests.controlplane.cluster import running_control_plane

    with running_control_plane(driver_access=False) as cp:
        yield cp


def machines_summary(cluster: Cluster) -> Mapping[str, int]:
    out: dict[str, int] = {}
    for kind in cluster.kinds.values():
        out[kind] = out.get(kind, 0) + 1
    return out


# ----- churn: jobs finish at random while new ones arrive ------------------------------------


@dataclass
class ChurnRun:
    scenario: str
    # per event: (event index, "finish" | "arrive", accelerators placed, free, stranded)
    timeline: list[tuple[int, str, int, int, int]]
    arrivals: int
    rejected: int  # arrivals the scheduler found no room for
    seconds: float


def _wait_gone(cp: Any, ns: str, name: str, timeout: float = 60.0) -> None:
    res = k8s.ResourceV1Api(cp.api_client())
    deadline = time.monotonic() + timeout
    while True:
        try:
            res.read_namespaced_resource_claim(name, ns)
        except ApiException as err:
            if err.status == 404:
                return
            raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"{ns}/{name}: claim still there after {timeout:.0f} s")
        time.sleep(0.1)


def run_churn(
    cp: Any,
    cluster: Cluster,
    scenario: str,
    fill: Sequence[Job],
    arrivals: Sequence[Job],
    namespace: str,
    *,
    seed: int,
    events: int,
    finish_share: float = 0.5,
    timeout: float = 60.0,
) -> ChurnRun:
    """Fills the cluster with `fill` (as run_scenario), then `events` events: with probability
    `finish_share` a running job (chosen at random) finishes and its claim is deleted, else the
    next job of `arrivals` is submitted (deleted at once when it finds no room). After every
    event the free and stranded accelerators are recorded (metrics.stranded_for)."""
    import random

    from hack.bench.metrics import free_on_node, stranded_for

    base = run_scenario(cp, cluster, scenario, fill, namespace, timeout=timeout)
    running: dict[str, Placement] = {p.job.name: p for p in base.placements}
    dyn = cp.dynamic
    from tests.controlplane.cluster import api_resource

    pods, claims = api_resource(dyn, "Pod", "v1"), api_resource(dyn, "ResourceClaim")
    rng, pick = random.Random(seed), random.Random(seed + 1)  # what happens; which job finishes
    cpa = fill[0].cpus_per_accelerator if fill else 4
    timeline: list[tuple[int, str, int, int, int]] = []
    seen = Observed()
    rejected = arrived = 0
    queue = list(arrivals)
    began = time.monotonic()

    def record(i: int, what: str) -> None:
        by_node: dict[str, list[Placement]] = {n: [] for n in cluster.nodes}
        for p in running.values():
            by_node[p.node].append(p)
        free = {n: free_on_node(m, by_node[n]) for n, m in cluster.nodes.items()}
        placed = sum(len(p.accelerators) for p in running.values())
        free_acc = sum(len(f.accelerators) for f in free.values())
        timeline.append((i, what, placed, free_acc, stranded_for(scenario, cluster.nodes, free, cpa)))

    record(0, "filled")
    with Watcher(cp, namespace, seen):
        for i in range(1, events + 1):
            if running and (rng.random() < finish_share or not queue):
                name = pick.choice(sorted(running))
                _delete_job(cp, namespace, name)
                _wait_gone(cp, namespace, name)
                del running[name]
                record(i, "finish")
                continue
            job = queue.pop(0)
            arrived += 1
            claims.create(body=claim_body(job, scenario), namespace=namespace)
            with seen.changed:
                seen.created[job.name] = time.monotonic()
            pods.create(body=pod_body(job), namespace=namespace)

            def verdict(name: str = job.name) -> bool:
                return (name in seen.bound and name in seen.allocated) or name in seen.unschedulable

            with seen.changed:
                if not seen.changed.wait_for(verdict, timeout):
                    raise TimeoutError(
                        f"churn {scenario} {job.name}: no scheduling verdict in {timeout:.0f} s"
                    )
                ok = job.name in seen.bound and job.name in seen.allocated
            if ok:
                node = seen.bound[job.name][1]
                results = seen.allocated[job.name][1]
                running[job.name] = placement_from_results(job, node, cluster.nodes[node], results)
            else:
                rejected += 1
                _delete_job(cp, namespace, job.name)
                _wait_gone(cp, namespace, job.name)
            record(i, "arrive")
    return ChurnRun(scenario, timeline, arrived, rejected, time.monotonic() - began)
