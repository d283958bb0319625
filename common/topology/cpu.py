"""CPUs, packages, cores and caches from sys/devices/system/cpu.

Grouping follows the kernel's masks restricted to usable CPUs, not the id numbers, which repeat
across dies or compute units and are -1 on s390/ppc. Groups always partition the CPUs (no CPU in
two packages, cores or caches of one level and type), and a package always contains its cores.

Where the masks contradict each other (buggy firmware or a damaged capture: one CPU's package
mask names a set that the CPUs it names do not name back), the kernel's id decides for the CPUs
involved: each CPU has exactly one physical_package_id (one core_id within its package, die and
cluster), which cannot half-overlap another the way two sets can, and the masks are built from
those ids in the first place. hwloc instead drops the object whose set conflicts, which leaves
CPUs outside every package; drivers need each CPU in exactly one socket. When a disputed CPU has
no id (-1, missing), each CPU joins the group of the lowest CPU whose mask names it. Either way
a warning names the CPUs and the rule used. Package ids are then unique: an id that two
packages with agreeing masks both carry is kept by the lower and dropped (None) from the other.
Dies are the (package, die_id) pairs, so they partition by construction; a core whose CPUs name
different dies takes its lowest CPU's. A cache whose shared_cpu_map names CPUs that a cache of
the same level and type read before already holds keeps only the others (the lowest CPU's cache
wins; cache ids are too often absent to decide).
"""

from __future__ import annotations

from topodra.common.topology.model import Cache, Core, Cpu, Package
from topodra.common.topology.names import numbered
from topodra.common.topology.parse import (
    cached_cpumask,
    compress,
    parse_cpulist,
    parse_int,
    parse_size,
    read_cpus,
    read_id,
)
from topodra.common.topology.reader import SysfsReader, is_dir, shown

# for annotations only (strings here): importing collections.abc costs ~0.2 ms on the inspect path
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

CPU_DIR = "sys/devices/system/cpu"
_CACHE_TYPES = {"Data": "data", "Instruction": "instruction", "Unified": "unified"}
# AMD families whose "compute units" pair two cores in one thread_siblings mask (hwloc does the same).
_AMD_CU_FAMILIES = (0x15, 0x16)


# The intermediate records below are plain slotted classes, not dataclasses: they never leave
# discovery, and each dataclass costs a millisecond of code generation at import, which
# `topodra inspect` pays on every run.


class CpuPresence:
    """Which cpuN folders exist, which are online, which are usable."""

    __slots__ = ("complete", "online", "usable")

    def __init__(self, complete: tuple[int, ...], online: frozenset[int], usable: frozenset[int]) -> None:
        self.complete = complete
        self.online = online
        self.usable = usable


class CpuTopology:
    __slots__ = ("caches", "cores", "cpus", "packages")

    def __init__(
        self,
        cpus: tuple[Cpu, ...],
        packages: tuple[Package, ...],
        cores: tuple[Core, ...],
        caches: tuple[Cache, ...],
    ) -> None:
        self.cpus = cpus
        self.packages = packages
        self.cores = cores
        self.caches = caches


def find_cpus(r: SysfsReader) -> CpuPresence:
    ids = []
    for entry in r.scandir(CPU_DIR):
        n = numbered(entry.name, "cpu")
        if n is not None and is_dir(entry):
            ids.append(n)
    ids.sort()
    global_online: frozenset[int] | None = None
    global_read = False
    online: set[int] = set()
    usable: set[int] = set()
    for n in ids:
        base = f"{CPU_DIR}/cpu{n}"
        state: bool | None = None
        rel = f"{base}/online"
        text = r.read(rel)
        if text is not None:
            if text in ("0", "1"):
                state = text == "1"
            else:
                r.warn(rel, f"not 0 or 1: {shown(text)}")
        if state is None:
            # cpu0 often has no online file (it cannot be unplugged); some captures have none at all.
            if not global_read:
                global_online = read_cpus(r, None, f"{CPU_DIR}/online")
                global_read = True
            state = global_online is None or n in global_online
        if state:
            online.add(n)
            if r.is_dir(f"{base}/topology"):
                usable.add(n)
    return CpuPresence(tuple(ids), frozenset(online), frozenset(usable))


def _first_cpus(r: SysfsReader, base: str, names: tuple[str, ...]) -> frozenset[int] | None:
    """The first of several equivalent files (new name, old name, list forms) that parses."""
    for name in names:
        rel = f"{base}/{name}"
        text = r.read(rel)
        if text is None:
            continue
        value: frozenset[int] | None = (
            parse_cpulist(text) if name.endswith("_list") else cached_cpumask(r, text)
        )
        if value is not None:
            return value
        r.warn(rel, f"not a CPU {'list' if name.endswith('_list') else 'mask'}: {shown(text)}")
    return None


_PACKAGE_MASKS = ("package_cpus", "core_siblings", "package_cpus_list", "core_siblings_list")
_CORE_MASKS = ("core_cpus", "thread_siblings", "core_cpus_list", "thread_siblings_list")


class _Raw:
    __slots__ = ("cluster_id", "core_id", "core_mask", "die_id", "package_id", "package_mask")

    def __init__(
        self,
        package_id: int | None,
        die_id: int | None,
        cluster_id: int | None,
        core_id: int | None,
        package_mask: frozenset[int] | None,
        core_mask: frozenset[int] | None,
    ) -> None:
        self.package_id = package_id
        self.die_id = die_id
        self.cluster_id = cluster_id
        self.core_id = core_id
        self.package_mask = package_mask
        self.core_mask = core_mask


def _partition(order: Iterable[int], mask_of: dict[int, frozenset[int]]) -> list[tuple[int, ...]]:
    """Disjoint groups: each CPU joins the group of the lowest CPU whose mask names it."""
    taken: set[int] = set()
    groups = []
    for n in order:
        if n in taken:
            continue
        members = {c for c in mask_of[n] if c not in taken and c in mask_of}
        members.add(n)
        taken.update(members)
        groups.append(tuple(sorted(members)))
    return groups


def _restricted(
    masks: dict[int, frozenset[int] | None], keep_of: Callable[[int], frozenset[int]]
) -> dict[int, frozenset[int]]:
    """Each CPU's mask cut to its `keep_of` set, itself included. CPUs sharing a mask and a keep
    set share one result object (the reader's memo hands out one mask object per text), so
    comparing them is an identity check."""
    memo: dict[tuple[int, int], frozenset[int]] = {}
    out: dict[int, frozenset[int]] = {}
    for n, m in masks.items():
        if m is None:
            continue
        keep = keep_of(n)
        cut = memo.get((id(m), id(keep)))
        if cut is None:
            cut = memo[(id(m), id(keep))] = m & keep
        out[n] = cut if n in cut else cut | {n}
    return out


def _grouped(
    r: SysfsReader,
    order: list[int],
    mask_of: dict[int, frozenset[int]],
    key_of: dict[int, object],
    what: str,
    key_name: str,
) -> list[tuple[int, ...]]:
    """Disjoint groups by mask; where masks contradict each other, by the kernel's id (module doc)."""
    groups = _partition([n for n in order if n in mask_of], mask_of)
    disputed: set[int] = set()
    example = ""
    for g in groups:
        first = mask_of[g[0]]
        agree = len(first) == len(g) and all((m := mask_of[c]) is first or m == first for c in g)
        if not agree:
            disputed.update(g)
            if not example:
                odd = next((c for c in g if mask_of[c] != first), g[0])
                example = (
                    f"cpu{g[0]} names {compress(first)}, cpu{odd} names {compress(mask_of[odd])}"
                    if odd != g[0]
                    else f"cpu{g[0]} names {compress(first)}, which do not all name it back"
                )
    if not disputed:
        return groups
    keys = {key_of.get(c) for c in disputed}
    if None in keys:
        rule = "each CPU joins the group of the lowest CPU whose mask names it (not every one has an id)"
        resolved = [g for g in groups if g[0] in disputed]
    else:
        # CPUs outside the dispute that carry a disputed id join it, so one id makes one group
        disputed.update(c for c in mask_of if key_of.get(c) in keys)
        by_key: dict[object, list[int]] = {}
        for c in sorted(disputed):
            by_key.setdefault(key_of[c], []).append(c)
        rule = f"grouped by {key_name}, which the kernel gives each CPU once"
        resolved = [tuple(v) for v in by_key.values()]
    kept = [g for g in groups if not disputed.intersection(g)]
    r.warn(
        f"{CPU_DIR}/cpu{min(disputed)}/topology",
        f"{what} masks contradict each other ({example}): CPUs {compress(disputed)} {rule}",
    )
    return sorted(kept + resolved)


def _amd_compute_units(r: SysfsReader) -> bool:
    text = r.read("proc/cpuinfo")
    if text is None:
        return False
    vendor = family = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "vendor_id":
            vendor = value.strip()
        elif key == "cpu family":
            family = parse_int(value)
        elif not line.strip():
            break  # first processor block is enough
    return vendor == "AuthenticAMD" and family in _AMD_CU_FAMILIES


def _core_types(r: SysfsReader, usable: frozenset[int]) -> dict[int, str]:
    out: dict[int, str] = {}
    for kind in ("core", "atom"):
        rel = f"sys/devices/cpu_{kind}/cpus"
        text = r.read(rel)
        if text is None:
            continue
        cpus = parse_cpulist(text)
        if cpus is None:
            r.warn(rel, f"not a CPU list: {shown(text)}")
            continue
        for c in cpus & usable:
            out[c] = kind
    return out


def read_topology(r: SysfsReader, presence: CpuPresence, numa_of: dict[int, int]) -> CpuTopology:
    usable = presence.usable
    raw: dict[int, _Raw] = {}
    for n in sorted(usable):
        base = f"{CPU_DIR}/cpu{n}/topology"
        raw[n] = _Raw(
            package_id=read_id(r, f"{base}/physical_package_id", required=True),
            die_id=read_id(r, f"{base}/die_id", required=False),
            cluster_id=read_id(r, f"{base}/cluster_id", required=False),
            core_id=read_id(r, f"{base}/core_id", required=False),
            package_mask=_first_cpus(r, base, _PACKAGE_MASKS),
            core_mask=_first_cpus(r, base, _CORE_MASKS),
        )
    order = sorted(usable)

    # Packages: by mask. A CPU without any package mask belongs to no package (hwloc does the
    # same); the id decides only where masks contradict each other (module doc).
    with_mask = frozenset(n for n in order if raw[n].package_mask is not None)
    pkg_mask = _restricted({n: raw[n].package_mask for n in order}, lambda n: with_mask)
    pkg_key: dict[int, object] = {n: raw[n].package_id for n in order}
    packages: list[Package] = []
    package_of: dict[int, int] = {}
    ids_seen: dict[int, int] = {}
    for group in _grouped(r, order, pkg_mask, pkg_key, "package", "physical_package_id"):
        index = len(packages)
        pid = raw[group[0]].package_id
        if pid is not None and pid in ids_seen:
            r.warn(
                f"{CPU_DIR}/cpu{group[0]}/topology/physical_package_id",
                f"package id {pid} is also that of CPUs {compress(packages[ids_seen[pid]].cpus)}, "
                f"whose masks keep them apart from CPUs {compress(group)}: the id is dropped here",
            )
            pid = None
        elif pid is not None:
            ids_seen[pid] = index
        packages.append(Package(index=index, id=pid, cpus=group))
        for c in group:
            package_of[c] = index

    # Cores: by mask, inside the package; CPUs without any core mask get no core (as hwloc).
    amd_cu: bool | None = None
    members_of: dict[int | None, list[int]] = {}
    for n in order:
        if raw[n].core_mask is not None:
            members_of.setdefault(package_of.get(n), []).append(n)
    same_package = {p: frozenset(v) for p, v in members_of.items()}
    core_mask = _restricted({n: raw[n].core_mask for n in order}, lambda n: same_package[package_of.get(n)])
    core_key: dict[int, object] = {
        n: None
        if raw[n].core_id is None
        else (package_of.get(n), raw[n].die_id, raw[n].cluster_id, raw[n].core_id)
        for n in order
    }
    types = _core_types(r, usable)
    cores: list[Core] = []
    core_of: dict[int, int] = {}
    groups = _grouped(r, order, core_mask, core_key, "core", "package, die, cluster and core_id")
    die_of: dict[int, int | None] = {}
    for group in groups:
        die = raw[group[0]].die_id
        odd = [c for c in group if raw[c].die_id != die]
        if odd:
            r.warn(
                f"{CPU_DIR}/cpu{odd[0]}/topology/die_id",
                f"CPUs {compress(group)} share a core but not a die: the core's lowest CPU's die "
                f"({die}) is taken for CPUs {compress(odd)}",
            )
            for c in odd:
                die_of[c] = die
        split = [group]
        if len(group) > 1:
            ids = {raw[c].core_id for c in group}
            if len(ids) > 1:
                if amd_cu is None:
                    amd_cu = _amd_compute_units(r)
                if amd_cu:  # a compute unit: each thread is its own core
                    split = [(c,) for c in group]
        for cpus in split:
            index = len(cores)
            cores.append(
                Core(
                    index=index,
                    package=package_of.get(cpus[0]),
                    id=raw[cpus[0]].core_id,
                    cpus=cpus,
                    core_type=types.get(cpus[0]),
                )
            )
            for c in cpus:
                core_of[c] = index

    caches = _read_caches(r, order, usable, {c: cores[i].cpus for c, i in core_of.items()})

    cpu_list = []
    for n in presence.complete:
        rw = raw.get(n)
        cpu_list.append(
            Cpu(
                id=n,
                online=n in presence.online,
                usable=n in usable,
                package=package_of.get(n),
                package_id=rw.package_id if rw else None,
                die_id=die_of.get(n, rw.die_id) if rw else None,
                cluster_id=rw.cluster_id if rw else None,
                core=core_of.get(n),
                core_id=rw.core_id if rw else None,
                numa_node=numa_of.get(n),
                core_type=types.get(n),
            )
        )
    return CpuTopology(tuple(cpu_list), tuple(packages), tuple(cores), caches)


def _read_caches(
    r: SysfsReader, order: list[int], usable: frozenset[int], core_cpus: dict[int, tuple[int, ...]]
) -> tuple[Cache, ...]:
    seen_index: set[tuple[str, frozenset[int]]] = set()
    # CPUs already described by a cache read through the same indexN of an earlier CPU: their own
    # indexN is that cache (the kernel builds both maps from one cache leaf), so it is not re-read.
    covered: dict[str, set[int]] = {}
    seen: dict[tuple[int, str, tuple[int, ...]], Cache] = {}
    # CPUs each (level, type) already has a cache for: caches of one kind partition the CPUs
    owned: dict[tuple[int, str], set[int]] = {}
    for n in order:
        base = f"{CPU_DIR}/cpu{n}/cache"
        names = sorted((i, e.name) for e in r.scandir(base) if (i := numbered(e.name, "index")) is not None)
        for _, name in names:
            if n in covered.get(name, ()):
                continue
            d = f"{base}/{name}"
            mask = _first_cpus(r, d, ("shared_cpu_map", "shared_cpu_list"))
            if mask is None:
                mask = frozenset()
            cpus = mask & usable
            if not cpus:
                # Empty shared_cpu_map (ia64, some VMs): the cache belongs to the core (hwloc rule).
                cpus = frozenset(core_cpus.get(n, (n,)))
            cpus = cpus | {n}
            covered.setdefault(name, set()).update(cpus)
            key = (name, cpus)
            if key in seen_index:
                continue  # the same cache, already read through a sibling
            seen_index.add(key)
            level = read_id(r, f"{d}/level", required=True)
            ctype_text = r.read(f"{d}/type")
            if ctype_text is None:
                r.warn(f"{d}/type", "missing")
                continue
            ctype = _CACHE_TYPES.get(ctype_text)
            if ctype is None:
                if ctype_text != "Unknown":
                    r.warn(f"{d}/type", f"unknown cache type: {shown(ctype_text)}")
                continue
            if level is None:
                continue
            size_rel = f"{d}/size"
            size_text = r.read(size_rel)
            size = None
            if size_text is not None:
                size = parse_size(size_text)
                if size is None:
                    r.warn(size_rel, f"not a size: {shown(size_text)}")
            cpu_tuple = tuple(sorted(cpus))
            ckey = (level, ctype, cpu_tuple)
            if ckey in seen:
                continue
            mine = owned.setdefault((level, ctype), set())
            if not mine.isdisjoint(cpus):
                rest = cpus - mine
                r.warn(
                    f"{d}/shared_cpu_map",
                    f"names CPUs {compress(cpus & mine)} that an L{level} {ctype} cache read before "
                    f"already holds: they stay there (the lowest CPU's cache wins), this cache keeps "
                    f"{compress(rest) or 'none'}",
                )
                if not rest:
                    continue
                cpu_tuple = tuple(sorted(rest))
                ckey = (level, ctype, cpu_tuple)
            mine.update(cpu_tuple)
            seen[ckey] = Cache(
                level=level,
                type=ctype,
                id=read_id(r, f"{d}/id", required=False),
                size_bytes=size,
                cpus=cpu_tuple,
                line_size=read_id(r, f"{d}/coherency_line_size", required=False),
                ways=read_id(r, f"{d}/ways_of_associativity", required=False),
            )
    return tuple(sorted(seen.values(), key=lambda c: (c.level, c.type, c.cpus)))
