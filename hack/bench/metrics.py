"""Placement quality from allocation results: pure functions over the devices the scheduler chose.

A claim of scenario A does not say which NIC serves which accelerator, so every job is scored by
its best pairing (the one the job itself would use); for scenario B that pairing is the claim's
own. Alignment levels nest: same switch => same root complex => same NUMA node => same socket on
every machine here, and each level is reported as the fraction of pairs that reach it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hack.bench.fallback import level_of
from hack.bench.inventory import ACCELERATOR, CPU, NIC, Dev, Machine
from hack.bench.workload import Job

SWITCH, ROOT, NUMA_LEVEL, SOCKET, CROSS = range(5)
LEVEL_NAMES = ("switch", "root", "NUMA", "socket", "cross-socket")


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one job landed: its devices and the CPUs it takes from each CPU device."""

    job: Job
    node: str
    accelerators: tuple[Dev, ...]
    nics: tuple[Dev, ...]
    cpus: tuple[tuple[Dev, int], ...]
    # the fallback level each accelerator's result records ("switch", "numa-rails", ...): only
    # claims with prioritized lists (scenario C) have them
    levels: tuple[str, ...] = ()


def placement_from_results(
    job: Job, node: str, machine: Machine, results: Iterable[Mapping[str, Any]]
) -> Placement:
    """Builds a Placement from `status.allocation.devices.results` of the job's claim."""
    accs: list[Dev] = []
    nics: list[Dev] = []
    cpus: list[tuple[Dev, int]] = []
    levels: list[str] = []
    for r in results:
        driver, name = str(r["driver"]), str(r["device"])
        if r.get("pool") not in (None, node):
            raise ValueError(
                f"{job.name}: device {driver}/{name} comes from pool {r.get('pool')}, not {node}"
            )
        dev = machine.device(driver, name)
        if driver == ACCELERATOR:
            accs.append(dev)
            level = level_of(str(r.get("request", "")))
            if level is not None:
                levels.append(level)
        elif driver == NIC:
            nics.append(dev)
        elif driver == CPU:
            consumed = (r.get("consumedCapacity") or {}).get("cpu.topodra.io/cpu")
            cpus.append((dev, int(str(consumed)) if consumed is not None else dev.cpus))
        else:
            raise ValueError(f"{job.name}: unexpected driver {driver!r} in the allocation")
    return Placement(job, node, tuple(accs), tuple(nics), tuple(cpus), tuple(levels))


def distance(acc: Dev, nic: Dev) -> int:
    """How far apart an accelerator and a NIC are (SWITCH .. CROSS); unknown never counts as equal."""
    if acc.switch is not None and acc.switch == nic.switch:
        return SWITCH
    if acc.root is not None and acc.root == nic.root:
        return ROOT
    if acc.numa is not None and acc.numa == nic.numa:
        return NUMA_LEVEL
    if acc.socket is not None and acc.socket == nic.socket:
        return SOCKET
    return CROSS


def best_pairing(accs: Sequence[Dev], nics: Sequence[Dev]) -> list[tuple[Dev, Dev]]:
    """The one-to-one pairing with the least total distance (bitmask DP; k <= 8 here).

    With fewer NICs than accelerators the extra accelerators stay unpaired.
    """
    n, m = len(accs), len(nics)
    if n == 0 or m == 0:
        return []
    if m > 16:
        raise ValueError(f"pairing {m} NICs is beyond this exhaustive search")
    k = min(n, m)
    # best[mask] = (cost, choices) after pairing the first popcount(mask) accelerators (of k)
    best: dict[int, tuple[int, tuple[int, ...]]] = {0: (0, ())}
    for i in range(k):
        nxt: dict[int, tuple[int, tuple[int, ...]]] = {}
        for mask, (cost, chosen) in best.items():
            for j in range(m):
                if mask & (1 << j):
                    continue
                cand = (cost + distance(accs[i], nics[j]), (*chosen, j))
                key = mask | (1 << j)
                if key not in nxt or cand < nxt[key]:
                    nxt[key] = cand
        best = nxt
    _, chosen = min(best.values())
    return [(accs[i], nics[j]) for i, j in enumerate(chosen)]


@dataclass(frozen=True, slots=True)
class PairScore:
    level: int  # distance(acc, nic)
    numa: bool  # accelerator, NIC and some of the job's CPUs on one NUMA node
    socket: bool  # the same on one socket
    crosses_socket: bool  # accelerator and NIC on different sockets
    cpu_remote: bool  # none of the job's CPUs on the accelerator's socket


def score_pairs(p: Placement) -> list[PairScore]:
    cpu_numas = {d.numa for d, n in p.cpus if n > 0 and d.numa is not None}
    cpu_sockets = {d.socket for d, n in p.cpus if n > 0 and d.socket is not None}
    out = []
    for acc, nic in best_pairing(p.accelerators, p.nics):
        level = distance(acc, nic)
        out.append(
            PairScore(
                level=level,
                numa=level <= NUMA_LEVEL and acc.numa in cpu_numas,
                socket=level <= SOCKET and acc.socket in cpu_sockets,
                crosses_socket=level == CROSS,
                cpu_remote=acc.socket not in cpu_sockets,
            )
        )
    return out


# ----- what is left: free and stranded devices ----------------------------------------------


@dataclass(frozen=True, slots=True)
class Free:
    accelerators: tuple[Dev, ...]
    nics: tuple[Dev, ...]
    cpus: Mapping[str, int]  # CPU device name -> free CPUs


def free_on_node(machine: Machine, placements: Iterable[Placement]) -> Free:
    placements = list(placements)
    used_acc = {d.name for p in placements for d in p.accelerators}
    used_nic = {d.name for p in placements for d in p.nics}
    taken: Counter[str] = Counter()
    for p in placements:
        for d, n in p.cpus:
            taken[d.name] += n
    return Free(
        tuple(d for d in machine.of(ACCELERATOR) if d.name not in used_acc),
        tuple(d for d in machine.of(NIC) if d.name not in used_nic),
        {d.name: d.cpus - taken[d.name] for d in machine.of(CPU)},
    )


def aligned_pairs_possible(machine: Machine, free: Free, cpus_per_accelerator: int) -> int:
    """How many (accelerator, NIC, CPU share) triples scenario B's claims could still take here.

    A triple needs a free accelerator and a free NIC on one switch and the CPU share on their
    NUMA node. Per switch that is min(free accelerators, free NICs); per NUMA node the sum is
    capped by the free CPUs there.
    """
    per_switch: dict[tuple[str, int | None], list[int]] = {}
    for d in free.accelerators:
        if d.switch is not None:
            per_switch.setdefault((d.switch, d.numa), [0, 0])[0] += 1
    for d in free.nics:
        if d.switch is not None and (d.switch, d.numa) in per_switch:
            per_switch[(d.switch, d.numa)][1] += 1
    pairs_by_numa: Counter[int | None] = Counter()
    for (_, numa), (a, n) in per_switch.items():
        pairs_by_numa[numa] += min(a, n)
    cpus_by_numa: Counter[int | None] = Counter()
    for d in machine.of(CPU):
        cpus_by_numa[d.numa] += max(0, free.cpus.get(d.name, 0))
    step = max(1, cpus_per_accelerator)
    return sum(
        min(pairs, cpus_by_numa[numa] // step) for numa, pairs in pairs_by_numa.items() if numa is not None
    )


def count_fits(machine: Machine, free: Free, job: Job) -> bool:
    """Whether scenario A's claim for `job` fits: k free accelerators, k free NICs, CPUs on one device."""
    most_cpus = max((free.cpus.get(d.name, 0) for d in machine.of(CPU)), default=0)
    return len(free.accelerators) >= job.accelerators and len(free.nics) >= job.nics and most_cpus >= job.cpus


def best_fill(capacity: int, sizes: Iterable[int]) -> int:
    """The largest total of a sub-multiset of `sizes` that is <= capacity (subset sum)."""
    reach = 1  # bit s set: total s reachable
    limit = (1 << (capacity + 1)) - 1
    for s in sizes:
        if 0 < s <= capacity:
            reach = (reach | (reach << s)) & limit
    return reach.bit_length() - 1


@dataclass(frozen=True, slots=True)
class Stranded:
    free_accelerators: int
    free_nics: int
    stranded_accelerators: int
    stranded_nics: int


def stranded_aligned(
    nodes: Mapping[str, Machine], free: Mapping[str, Free], pending: Sequence[Job]
) -> Stranded:
    """Free devices that no pending job could take with aligned claims.

    Per node, pending jobs (each at most once) fill at most the node's possible aligned triples;
    what they cannot fill is stranded. Pending jobs are offered to every node independently, so
    this undercounts (a job can only land once): the figure is a lower bound.
    """
    cpa = pending[0].cpus_per_accelerator if pending else 1
    sizes = [j.accelerators for j in pending]
    fa = fn = sa = sn = 0
    for node, machine in nodes.items():
        f = free[node]
        usable = best_fill(aligned_pairs_possible(machine, f, cpa), sizes)
        fa += len(f.accelerators)
        fn += len(f.nics)
        sa += len(f.accelerators) - usable
        sn += len(f.nics) - usable
    return Stranded(fa, fn, sa, sn)


def stranded_count(
    nodes: Mapping[str, Machine], free: Mapping[str, Free], pending: Sequence[Job]
) -> Stranded:
    """The same with count-only claims: a node's free devices are usable if some pending job fits."""
    fa = fn = sa = sn = 0
    for node, machine in nodes.items():
        f = free[node]
        fitting = [j.accelerators for j in pending if count_fits(machine, f, j)]
        usable = best_fill(min(len(f.accelerators), len(f.nics)), fitting)
        fa += len(f.accelerators)
        fn += len(f.nics)
        sa += len(f.accelerators) - usable
        sn += len(f.nics) - usable
    return Stranded(fa, fn, sa, sn)


def usable_by_one(machine: Machine, free: Free, scenario: str, cpus_per_accelerator: int) -> bool:
    """Whether a 1-accelerator job with the scenario's claim fits in what is free on a node."""
    from hack.bench.workload import ALIGNED

    if scenario == ALIGNED:
        return aligned_pairs_possible(machine, free, cpus_per_accelerator) > 0
    return count_fits(machine, free, Job(0, 1, cpus_per_accelerator))


def stranded_for(
    scenario: str, nodes: Mapping[str, Machine], free: Mapping[str, Free], cpus_per_accelerator: int
) -> int:
    """Free accelerators on nodes where not even a 1-accelerator job of the scenario fits.

    C's last level asks no more than A's claim, so C strands what A strands; B strands every
    free accelerator without a free NIC on its switch (and CPUs on its NUMA node). Used for
    the churn phase, where the pending jobs are whatever arrives next.
    """
    return sum(
        len(free[n].accelerators)
        for n, m in nodes.items()
        if free[n].accelerators and not usable_by_one(m, free[n], scenario, cpus_per_accelerator)
    )


def avoidable_cross_socket(nodes: Mapping[str, Machine], placements: Sequence[Placement]) -> int:
    """Accelerator-NIC pairs that cross sockets although the node, just before the job, had
    free accelerators and NICs to build that many more same-socket pairs.

    Replays the placements in the order they were made. Per job: m = same-socket pairs the free
    devices allowed (sum over sockets of min(free accelerators, free NICs), at most the job's
    pairs); the job's own same-socket pairs j; max(0, m - j) of its cross pairs were avoidable.
    """
    taken: dict[str, list[Placement]] = {n: [] for n in nodes}
    avoidable = 0
    for p in placements:
        machine = nodes[p.node]
        f = free_on_node(machine, taken[p.node])
        sockets = {d.socket for d in f.accelerators} | {d.socket for d in f.nics}
        possible = sum(
            min(sum(1 for d in f.accelerators if d.socket == s), sum(1 for d in f.nics if d.socket == s))
            for s in sockets
            if s is not None
        )
        pairs = best_pairing(p.accelerators, p.nics)
        same = sum(1 for a, n in pairs if a.socket is not None and a.socket == n.socket)
        avoidable += max(0, min(len(pairs), possible) - same)
        taken[p.node].append(p)
    return avoidable


# ----- latency and the misalignment cost model --------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..1), None for no samples."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass(frozen=True, slots=True)
class CostModel:
    """A MODEL, not a measurement: every figure here is an assumption stated in the report.

    bytes_per_step: traffic between one accelerator and its NIC per training step (default 2 GiB,
    about a ring all-reduce of 1 GiB of gradients, i.e. ~500M bf16 parameters). When the pair sits
    on different sockets all of it crosses the socket interconnect.
    joules_per_byte: energy to move one byte over that interconnect (default 10 pJ/bit).
    steps_per_second: training steps per second (default 1).
    """

    bytes_per_step: float = 2 * 2**30
    joules_per_byte: float = 10e-12 * 8
    steps_per_second: float = 1.0

    def cost(self, cross_pairs: int) -> dict[str, float]:
        per_step = cross_pairs * self.bytes_per_step
        joules_per_step = per_step * self.joules_per_byte
        day = 86400 * self.steps_per_second
        return {
            "cross_socket_bytes_per_step": per_step,
            "joules_per_step": joules_per_step,
            "cross_socket_tib_per_day": per_step * day / 2**40,
            "kwh_per_day": joules_per_step * day / 3.6e6,
        }


# ----- one scenario's figures ---------------------------------------------------------------


@dataclass
class Timing:
    """Seconds from the pod's create call to each event, per job (watch receive times)."""

    bound: dict[str, float] = field(default_factory=dict)
    allocated: dict[str, float] = field(default_factory=dict)
    unschedulable: dict[str, float] = field(default_factory=dict)


def summarize(
    scenario: str,
    jobs: Sequence[Job],
    submitted: Sequence[Job],
    placements: Sequence[Placement],
    nodes: Mapping[str, Machine],
    timing: Timing,
    model: CostModel,
) -> dict[str, Any]:
    placed = {p.job.name for p in placements}
    pending = [j for j in jobs if j.name not in placed]
    by_node: dict[str, list[Placement]] = {n: [] for n in nodes}
    for p in placements:
        by_node[p.node].append(p)
    free = {n: free_on_node(m, by_node[n]) for n, m in nodes.items()}
    scores = [s for p in placements for s in score_pairs(p)]
    n = len(scores)

    def frac(ok: int) -> float | None:
        return ok / n if n else None

    aligned = stranded_aligned(nodes, free, pending)
    counted = stranded_count(nodes, free, pending)
    total_acc = sum(len(m.of(ACCELERATOR)) for m in nodes.values())
    cross = sum(1 for s in scores if s.crosses_socket)
    bound = list(timing.bound.values())
    alloc = list(timing.allocated.values())
    unsched = list(timing.unschedulable.values())
    levels = Counter(lv for p in placements for lv in p.levels)
    pair_levels = Counter(LEVEL_NAMES[s.level] for s in scores)
    return {
        "scenario": scenario,
        "claim_levels": dict(levels),
        "pair_levels": {name: pair_levels.get(name, 0) for name in LEVEL_NAMES},
        "avoidable_cross_socket": avoidable_cross_socket(nodes, placements),
        "jobs": len(jobs),
        "jobs_submitted": len(submitted),
        "jobs_placed": len(placements),
        "placed_by_size": {
            str(k): sum(1 for p in placements if p.job.accelerators == k) for k in (1, 2, 4, 8)
        },
        "wanted_by_size": {str(k): sum(1 for j in jobs if j.accelerators == k) for k in (1, 2, 4, 8)},
        "accelerators_total": total_acc,
        "accelerators_placed": sum(len(p.accelerators) for p in placements),
        "pairs": n,
        "aligned_switch": frac(sum(1 for s in scores if s.level <= SWITCH)),
        "aligned_root": frac(sum(1 for s in scores if s.level <= ROOT)),
        "aligned_numa": frac(sum(1 for s in scores if s.numa)),
        "aligned_socket": frac(sum(1 for s in scores if s.socket)),
        "pairs_cross_socket": cross,
        "accelerators_cpu_remote": sum(1 for s in scores if s.cpu_remote),
        "free_accelerators": aligned.free_accelerators,
        "free_nics": aligned.free_nics,
        "stranded_accelerators_aligned": aligned.stranded_accelerators,
        "stranded_nics_aligned": aligned.stranded_nics,
        "stranded_accelerators_count": counted.stranded_accelerators,
        "stranded_nics_count": counted.stranded_nics,
        "bound_p50_ms": _ms(percentile(bound, 0.5)),
        "bound_p99_ms": _ms(percentile(bound, 0.99)),
        "allocated_p50_ms": _ms(percentile(alloc, 0.5)),
        "allocated_p99_ms": _ms(percentile(alloc, 0.99)),
        "unschedulable_p50_ms": _ms(percentile(unsched, 0.5)),
        "unschedulable_p99_ms": _ms(percentile(unsched, 0.99)),
        "latency_samples": len(bound),
        "bound_ms_by_size": _by_size(jobs, timing.bound),
        "accelerators_by_machine": _by_machine(nodes, by_node),
        "model": model.cost(cross),
    }


def _by_size(jobs: Sequence[Job], seconds: Mapping[str, float]) -> dict[str, dict[str, float | None]]:
    """p50 and max of a latency per job size: large aligned claims cost the allocator more."""
    out: dict[str, dict[str, float | None]] = {}
    for k in (1, 2, 4, 8):
        values = [seconds[j.name] for j in jobs if j.accelerators == k and j.name in seconds]
        out[str(k)] = {"p50": _ms(percentile(values, 0.5)), "max": _ms(max(values) if values else None)}
    return out


def _by_machine(
    nodes: Mapping[str, Machine], by_node: Mapping[str, Sequence[Placement]]
) -> dict[str, list[int]]:
    """[allocated, total] accelerators per machine type."""
    out: dict[str, list[int]] = {}
    for name, m in nodes.items():
        cell = out.setdefault(m.kind, [0, 0])
        cell[0] += sum(len(p.accelerators) for p in by_node[name])
        cell[1] += len(m.of(ACCELERATOR))
    return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000
