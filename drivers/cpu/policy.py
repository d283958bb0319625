"""Which exclusive CPUs of one device a claim gets: a pure function of the device and what is free.

The order of preference is lexicographic:

1. whole cores: as many of the CPUs as possible come as complete free cores, so the claim
   shares no physical core with another claim (SMT siblings fight over the same pipelines);
2. then no new splits: CPUs that cannot come as whole cores are taken first from cores that
   are already split (a sibling held by another claim), and only then by breaking a free core,
   which keeps whole cores for later claims (less fragmentation);
3. then the fewest L3 cache groups (sharing a last-level cache is cheaper than crossing one);
4. then the lowest CPU ids, so the answer is deterministic.

"Whole" means every CPU of the core that is in this device; `Core.complete` also says whether
the core has siblings outside the device (reserved for the system). `fullCores` asks for whole,
complete cores only, and then the count must be met exactly: giving more CPUs than the scheduler
accounted for would hand out CPUs it may give to the next claim.

The L3 step is a search over single groups, then a greedy widening (groups with the most whole
cores first); it finds the fewest groups whenever one group suffices, and a small number
otherwise, without trying every combination of groups.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from topodra.common.topology.parse import compress as fmt

__all__ = ["Core", "PolicyError", "Request", "check_explicit", "choose", "fmt"]


class PolicyError(ValueError):
    """The request cannot be met inside this device; the message says why, in user terms."""


@dataclass(frozen=True, slots=True)
class Core:
    """One physical core as the policy sees it, restricted to the device's CPUs."""

    cpus: tuple[int, ...]  # sorted; never empty
    l3: int | None = None  # L3 group (any stable key); None: unknown
    core_type: str | None = None  # "core"/"atom" on hybrid parts
    complete: bool = True  # False: some usable siblings are outside the device (reserved)


@dataclass(frozen=True, slots=True)
class Request:
    count: int
    full_cores: bool = False
    core_type: str | None = None


@dataclass(frozen=True, slots=True)
class _Slot:
    core: Core
    free: tuple[int, ...]  # free CPUs of the core, sorted

    @property
    def whole(self) -> bool:
        return len(self.free) == len(self.core.cpus)

    @property
    def first(self) -> int:
        return self.free[0]


@dataclass(frozen=True, slots=True)
class _Pick:
    cpus: tuple[int, ...]
    loose: int  # CPUs not taken as whole cores
    broken: int  # whole free cores split
    groups: int  # L3 groups touched

    def key(self) -> tuple[int, int, int, tuple[int, ...]]:
        return (self.loose, self.broken, self.groups, self.cpus)


def _slots(cores: Sequence[Core], free: frozenset[int], core_type: str | None) -> list[_Slot]:
    slots = []
    for core in cores:
        if core_type is not None and core.core_type != core_type:
            continue
        avail = tuple(c for c in core.cpus if c in free)
        if avail:
            slots.append(_Slot(core, avail))
    slots.sort(key=lambda s: s.first)
    return slots


def _subset_reach(sizes: Sequence[int], limit: int) -> list[int]:
    """reach[i] has bit t set when some subset of sizes[i:] sums to t (t <= limit)."""
    mask = (1 << (limit + 1)) - 1
    reach = [0] * (len(sizes) + 1)
    reach[len(sizes)] = 1
    for i in range(len(sizes) - 1, -1, -1):
        reach[i] = (reach[i + 1] | (reach[i + 1] << sizes[i])) & mask
    return reach


def _whole_cores(wholes: Sequence[_Slot], count: int) -> tuple[list[_Slot], int]:
    """The lowest-id set of whole cores with the largest total <= count."""
    sizes = [len(s.free) for s in wholes]
    reach = _subset_reach(sizes, count)
    target = reach[0].bit_length() - 1  # the largest reachable total
    chosen = []
    t = target
    for i, s in enumerate(wholes):
        if t == 0:
            break
        if sizes[i] <= t and (reach[i + 1] >> (t - sizes[i])) & 1:
            chosen.append(s)
            t -= sizes[i]
    return chosen, target


def _groups(cpus: Iterable[int], l3_of: dict[int, int | None]) -> int:
    return len({l3_of[c] for c in cpus})


def _select(slots: Sequence[_Slot], count: int, l3_of: dict[int, int | None]) -> _Pick | None:
    if sum(len(s.free) for s in slots) < count:
        return None
    wholes = [s for s in slots if s.whole]
    chosen, total = _whole_cores(wholes, count)
    cpus = [c for s in chosen for c in s.free]
    rest = count - total
    taken = {id(s) for s in chosen}
    # Loose CPUs: first from cores already split by other claims, then by breaking free cores.
    fragments = sorted(c for s in slots if not s.whole for c in s.free)
    use = fragments[:rest]
    cpus.extend(use)
    rest -= len(use)
    broken = 0
    for s in wholes:
        if rest == 0:
            break
        if id(s) in taken:
            continue
        part = s.free[:rest]
        cpus.extend(part)
        rest -= len(part)
        broken += 1
    picked = tuple(sorted(cpus))
    return _Pick(picked, count - total, broken, _groups(picked, l3_of))


def choose(
    cores: Sequence[Core], free: Iterable[int], request: Request, device: str = "device"
) -> tuple[int, ...]:
    """Exclusive CPUs for `request` among the `free` CPUs of a device made of `cores`."""
    count = request.count
    if count < 1:
        raise PolicyError(f"{device}: asked for {count} CPUs; at least 1 is needed")
    free_set = frozenset(free)
    slots = _slots(cores, free_set, request.core_type)
    kind = f" of core type {request.core_type!r}" if request.core_type else ""
    if request.full_cores:
        slots = [s for s in slots if s.whole and s.core.complete]
    available = sum(len(s.free) for s in slots)
    if available < count:
        what = "CPUs in whole free cores" if request.full_cores else "free CPUs"
        raise PolicyError(f"{device}: asked for {count} CPUs{kind}, only {available} {what} are left")
    l3_of = {c: s.core.l3 for s in slots for c in s.free}
    best = _select(slots, count, l3_of)
    assert best is not None  # enough CPUs were checked above
    if request.full_cores and best.loose:
        sizes = sorted({len(s.free) for s in slots})
        raise PolicyError(
            f"{device}: fullCores: {count} CPUs{kind} cannot be made of whole free cores "
            f"(cores here have {'/'.join(map(str, sizes))} CPUs)"
        )
    return _narrow(slots, count, l3_of, best).cpus


def _narrow(slots: Sequence[_Slot], count: int, l3_of: dict[int, int | None], best: _Pick) -> _Pick:
    """The same core quality inside as few L3 groups as the search finds."""
    by_group: dict[int | None, list[_Slot]] = {}
    for s in slots:
        by_group.setdefault(s.core.l3, []).append(s)
    if len(by_group) < 2:
        return best
    quality = (best.loose, best.broken)
    singles = [p for g in by_group.values() if (p := _select(g, count, l3_of)) is not None]
    good = [p for p in singles if (p.loose, p.broken) == quality]
    if good:
        return min(good, key=_Pick.key)

    def rank(group: list[_Slot]) -> tuple[int, int, int]:
        whole = sum(len(s.free) for s in group if s.whole)
        return (-whole, -sum(len(s.free) for s in group), group[0].first)

    ordered = sorted(by_group.values(), key=rank)
    for k in range(2, len(ordered)):
        union = sorted((s for g in ordered[:k] for s in g), key=lambda s: s.first)
        pick = _select(union, count, l3_of)
        if pick is not None and (pick.loose, pick.broken) == quality:
            return min(pick, best, key=_Pick.key)
    return best


def check_explicit(
    cores: Sequence[Core],
    free: Iterable[int],
    wanted: Iterable[int],
    request: Request,
    device: str = "device",
) -> tuple[int, ...]:
    """Validate CPUs a claim named itself; returns them sorted or raises PolicyError."""
    wanted_set = frozenset(wanted)
    mine = {c for core in cores for c in core.cpus}
    outside = wanted_set - mine
    if outside:
        raise PolicyError(f"CPUs {fmt(outside)} are not part of device {device} (it has {fmt(mine)})")
    busy = wanted_set - frozenset(free)
    if busy:
        raise PolicyError(f"CPUs {fmt(busy)} of device {device} are already held by another claim")
    if len(wanted_set) != request.count:
        raise PolicyError(
            f"lists {len(wanted_set)} CPUs ({fmt(wanted_set)}) but the allocation of device {device} "
            f"is for {request.count}"
        )
    for core in cores:
        inside = wanted_set.intersection(core.cpus)
        if request.core_type is not None and inside and core.core_type != request.core_type:
            raise PolicyError(f"CPUs {fmt(inside)} are not of core type {request.core_type!r}")
        if request.full_cores and inside and (len(inside) != len(core.cpus) or not core.complete):
            raise PolicyError(
                f"fullCores: CPUs {fmt(inside)} are only part of the core {fmt(core.cpus)} of device {device}"
            )
    return tuple(sorted(wanted_set))
