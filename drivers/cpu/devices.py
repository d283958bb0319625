"""The CPU driver's devices: a pure function from the topology (and options) to what is published.

Layout (`--cpu-device-granularity`):
- `numa` (default): one device per NUMA node with usable CPUs, named `numa-<node id>`; CPUs the
  kernel puts in no node (firmware gaps) and machines without NUMA folders get one device per
  socket, `socket-<package index>`. Capacity `cpu.topodra.io/cpu` = its CPUs, with
  `allowMultipleAllocations` and a request policy of whole CPUs, so a claim asks for N CPUs of
  one node and several claims share the node.
- `core`: one exclusive device per physical core (SMT siblings together),
  `core-<package index>-<core id>`; where core ids repeat inside a package (multi-die parts,
  AMD compute units, s390 books) `core-<package>-<die id>-<core id>` when die ids tell them apart,
  else `core-<package>-cpu<lowest CPU>`. The scheme is chosen per package from the hardware, so a
  name never depends on enumeration order. For clusters without DRAConsumableCapacity.

Every name derives from kernel ids (NUMA node, core, die, CPU numbers) or the package index,
which is the position of the socket ordered by lowest CPU: stable across reboots, unique even
where `physical_package_id` repeats or is -1. `topology.topodra.io/socket` is that index too.
Reserved CPUs (`--cpu-reserved-cpus`) are left out of everything, and so are the CPUs kept for the
shared pool (`--cpu-shared-min`, `shared_keep`): the published capacity never lets the scheduler
hand out the last CPUs that containers without a claim run on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from topodra.common import pciattrs
from topodra.common.device import AttributeValue, Capacity, Device, NodeAllocatable, RequestPolicy
from topodra.common.topology.model import Topology
from topodra.common.topology.parse import compress
from topodra.drivers.cpu import policy
from topodra.drivers.cpu.options import CpuOptions

DRIVER = "cpu.topodra.io"
CAPACITY = f"{DRIVER}/cpu"
NUMA_NODE = "resource.kubernetes.io/numaNode"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
SOCKET = "topology.topodra.io/socket"
KIND = "topology.topodra.io/kind"  # "cpu" on every device (common/pciattrs.py says why)
CPU_COUNT = f"{DRIVER}/cpuCount"
CORE_COUNT = f"{DRIVER}/coreCount"
SMT = f"{DRIVER}/smt"
THREADS_PER_CORE = f"{DRIVER}/threadsPerCore"
L3_CACHE = f"{DRIVER}/l3CacheID"
CORE_TYPE = f"{DRIVER}/coreType"
CORE_ID = f"{DRIVER}/coreID"  # core granularity only
CPUS = f"{DRIVER}/cpus"  # core granularity only: the CPU numbers, e.g. "0,16"

MAX_ATTRIBUTE_VALUES = 48  # per device, list elements counted one each (1.36+)
MAX_STRING = 64


@dataclass(frozen=True, slots=True)
class CpuGroup:
    """One published device and everything prepare needs to know about it."""

    name: str
    kind: str  # "numa" | "socket" | "core"
    cpus: tuple[int, ...]  # usable, not reserved, sorted
    numa: int | None  # the one NUMA node of all its CPUs, else None
    package: int | None  # the one package index of all its CPUs, else None
    cores: tuple[policy.Core, ...]  # the policy's view of its CPUs
    multi: bool  # allowMultipleAllocations (consumable CPU count)


# --- layout -------------------------------------------------------------------------------------


def _core_units(topo: Topology, usable: Sequence[int]) -> list[tuple[int, ...]]:
    """Physical cores as CPU tuples; a CPU without core information is its own unit."""
    units: list[tuple[int, ...]] = []
    seen: set[int] = set()
    for n in usable:
        if n in seen:
            continue
        core = topo.core_of_cpu(n)
        cpus = core.cpus if core is not None else (n,)
        seen.update(cpus)
        units.append(cpus)
    return units


def l3_labels(topo: Topology) -> dict[int, str]:
    """CPU -> its L3 cache's label: the kernel's cache `id` when every L3 has a distinct one
    (what resctrl schemata use), else the L3's position among all L3s ordered by lowest CPU."""
    groups = topo.l3_groups()
    ids = [g.id for g in groups]
    use_ids = all(i is not None for i in ids) and len(set(ids)) == len(ids)
    out: dict[int, str] = {}
    for index, g in enumerate(groups):
        label = str(g.id) if use_ids else str(index)
        for c in g.cpus:
            out.setdefault(c, label)
    return out


def _policy_cores(
    topo: Topology, units: Sequence[tuple[int, ...]], cpus: frozenset[int], l3: dict[int, str]
) -> tuple[policy.Core, ...]:
    cores = []
    for unit in units:
        inside = tuple(c for c in unit if c in cpus)
        if not inside:
            continue
        label = l3.get(inside[0])
        cores.append(
            policy.Core(
                cpus=inside,
                l3=int(label) if label is not None else None,
                core_type=topo.core_type(inside[0]),
                complete=len(inside) == len(unit),
            )
        )
    return tuple(cores)


def _only(values: Sequence[int | None]) -> int | None:
    found = set(values)
    if len(found) != 1:
        return None
    return found.pop()


def _group(
    topo: Topology,
    name: str,
    kind: str,
    cpus: Sequence[int],
    units: Sequence[tuple[int, ...]],
    l3: dict[int, str],
    multi: bool,
) -> CpuGroup:
    members = tuple(sorted(cpus))
    return CpuGroup(
        name=name,
        kind=kind,
        cpus=members,
        numa=_only([topo.numa_of_cpu(c) for c in members]),
        package=_only([(c.package if (c := topo.cpu(n)) is not None else None) for n in members]),
        cores=_policy_cores(topo, units, frozenset(members), l3),
        multi=multi,
    )


def _core_names(topo: Topology, package: int, units: Sequence[tuple[int, ...]]) -> list[str]:
    """Names for one package's cores, by the most readable scheme that is unique (module doc)."""

    def cpu_field(n: int, attr: str) -> int | None:
        c = topo.cpu(n)
        value: int | None = getattr(c, attr) if c is not None else None
        return value

    core_ids = [cpu_field(u[0], "core_id") for u in units]
    if None not in core_ids and len(set(core_ids)) == len(core_ids):
        return [f"core-{package}-{i}" for i in core_ids]
    dies = [cpu_field(u[0], "die_id") for u in units]
    pairs = list(zip(dies, core_ids, strict=True))
    if None not in core_ids and None not in dies and len(set(pairs)) == len(pairs):
        return [f"core-{package}-{d}-{i}" for d, i in pairs]
    return [f"core-{package}-cpu{u[0]}" for u in units]


def shared_keep(topo: Topology, options: CpuOptions) -> frozenset[int]:
    """CPUs kept out of every device besides the reserved ones: at least `--cpu-shared-min`,
    in whole cores (a core split between the pool and a claim would share its pipelines with
    whatever runs on the pool), first the free siblings of reserved CPUs (those cores are split
    already), then cores by lowest CPU. Every usable CPU when there are not more than that."""
    if options.shared_min <= 0:
        return frozenset()
    free = [n for n in topo.usable_cpus() if n not in options.reserved]
    free_set = set(free)
    units = _core_units(topo, free)

    def touches_reserved(unit: tuple[int, ...]) -> bool:
        core = topo.core_of_cpu(unit[0])
        return core is not None and any(c in options.reserved for c in core.cpus)

    ordered = sorted(units, key=lambda u: (not touches_reserved(u), min(u)))
    kept: set[int] = set()
    for unit in ordered:
        if len(kept) >= options.shared_min:
            break
        kept.update(c for c in unit if c in free_set)
    return frozenset(kept)


def withheld(topo: Topology, options: CpuOptions) -> frozenset[int]:
    """CPUs in no device: reserved plus kept for the shared pool."""
    return frozenset(options.reserved) | shared_keep(topo, options)


def groups(topo: Topology, options: CpuOptions) -> tuple[CpuGroup, ...]:
    """The devices' CPU groups, in publishing order (by node, socket or core position)."""
    out_of_devices = withheld(topo, options)
    usable = [n for n in topo.usable_cpus() if n not in out_of_devices]
    l3 = l3_labels(topo)
    units = _core_units(topo, usable)
    if options.granularity == "core":
        by_package: dict[int, list[tuple[int, ...]]] = {}
        for unit in units:
            c = topo.cpu(unit[0])
            by_package.setdefault(c.package if c is not None and c.package is not None else 0, []).append(
                unit
            )
        out = []
        for package, members in sorted(by_package.items()):
            for name, unit in zip(_core_names(topo, package, members), members, strict=True):
                inside = [c for c in unit if c not in out_of_devices]
                if not inside:
                    continue
                out.append(_group(topo, name, "core", inside, [unit], l3, multi=False))
        return tuple(out)

    by_node: dict[int, list[int]] = {}
    by_socket: dict[int, list[int]] = {}
    for n in usable:
        node = topo.numa_of_cpu(n)
        if node is not None:
            by_node.setdefault(node, []).append(n)
            continue
        c = topo.cpu(n)
        by_socket.setdefault(c.package if c is not None and c.package is not None else 0, []).append(n)
    result = [
        _group(topo, f"numa-{node}", "numa", cpus, units, l3, True) for node, cpus in sorted(by_node.items())
    ]
    result += [
        _group(topo, f"socket-{pkg}", "socket", cpus, units, l3, True)
        for pkg, cpus in sorted(by_socket.items())
    ]
    return tuple(result)


# --- attributes ---------------------------------------------------------------------------------


def _numeric(labels: set[str]) -> list[str]:
    return sorted(labels, key=lambda s: (len(s), s))


def _attributes(
    topo: Topology, g: CpuGroup, options: CpuOptions, l3: dict[int, str]
) -> dict[str, AttributeValue]:
    attrs: dict[str, AttributeValue] = {KIND: "cpu"}
    lists = options.list_attributes
    if g.numa is not None and 0 <= g.numa <= pciattrs.MAX_NUMA_NODE:
        attrs[NUMA_NODE] = pciattrs.numa_list(topo, g.numa) if lists else g.numa
    if g.package is not None:
        attrs[SOCKET] = g.package
    threads = max(len(core.cpus) for core in g.cores)
    attrs[CPU_COUNT] = len(g.cpus)
    attrs[CORE_COUNT] = len(g.cores)
    attrs[THREADS_PER_CORE] = threads
    attrs[SMT] = threads > 1
    caches = {label for c in g.cpus if (label := l3.get(c)) is not None}
    if caches:
        ordered = _numeric(caches)
        joined = ",".join(ordered)
        if lists:
            attrs[L3_CACHE] = tuple(ordered)
        elif len(joined) <= MAX_STRING:
            attrs[L3_CACHE] = joined
    types = {t for c in g.cpus if (t := topo.core_type(c)) is not None}
    if types:
        if len(types) == 1:
            attrs[CORE_TYPE] = types.pop()
        else:
            attrs[CORE_TYPE] = tuple(sorted(types)) if lists else "mixed"
    if g.kind == "core":
        core = topo.core_of_cpu(g.cpus[0])
        if core is not None and core.id is not None:
            attrs[CORE_ID] = core.id
        attrs[CPUS] = compress(g.cpus)
    if lists:
        roots = tuple(r for r in topo.pcie_roots_local_to(g.cpus) if len(r) <= MAX_STRING)
        used = sum(len(v) if isinstance(v, tuple) else 1 for v in attrs.values())
        if roots and used + len(roots) <= MAX_ATTRIBUTE_VALUES:
            attrs[PCIE_ROOT] = roots
    return attrs


def _capacity(g: CpuGroup) -> Capacity:
    n = len(g.cpus)
    if not g.multi:
        return Capacity(str(n))
    if n == 1:  # validRange needs min+step <= capacity: a one-CPU range has no step
        return Capacity("1", RequestPolicy(default="1", min="1", max="1"))
    return Capacity(str(n), RequestPolicy(default="1", min="1", max=str(n), step="1"))


def _node_allocatable(g: CpuGroup) -> NodeAllocatable:
    """One node-allocatable cpu per CPU handed out: on a shared device the CPUs a claim
    consumes of its capacity, on an exclusive device (a core) all of its CPUs."""
    if g.multi:
        return NodeAllocatable(capacity_key=CAPACITY, capacity_multiplier="1")
    return NodeAllocatable(device_multiplier=str(len(g.cpus)))


def device_of(topo: Topology, g: CpuGroup, options: CpuOptions, l3: dict[int, str] | None = None) -> Device:
    return Device(
        name=g.name,
        attributes=_attributes(topo, g, options, l3 if l3 is not None else l3_labels(topo)),
        capacity={CAPACITY: _capacity(g)},
        allow_multiple_allocations=g.multi,
        node_allocatable={"cpu": _node_allocatable(g)} if options.node_allocatable else {},
    )


def build_devices(topo: Topology, options: CpuOptions) -> list[Device]:
    """What the CPU driver publishes for this machine."""
    l3 = l3_labels(topo)
    return [device_of(topo, g, options, l3) for g in groups(topo, options) if g.cpus]
