"""For two drivers: at which levels `matchAttribute` can line their devices up today.

The answer follows the scheduler's rules, not the machine's: a constraint on a name
skips devices that lack it, compares values of the same type only (an `int` never matches a
`string`), and compares a list by intersection (the scheduler does so where
DRAListTypeAttributes is on, and a stored list means it is). So a level is alignable when some
device of each driver carries the same name with values that meet. A level may also be
alignable only through values the check found wrong or malformed (two -1s meet): that is called
out, because such a claim allocates and lands wrong.

Levels and their names: root `resource.kubernetes.io/pcieRoot`, NUMA
`resource.kubernetes.io/numaNode`, switch `topology.topodra.io/pcieSwitch`, leaf (switch)
`topology.topodra.io/pcieLeafSwitch`, socket `topology.topodra.io/socket` (Kubernetes has no
switch or socket attribute). A name both drivers
publish under some driver's own domain that means the same level (`dra.net/numaNode`, which
dranet, the SR-IOV driver and the CPU driver all publish) is tried too, and reported as such.

For a level that is not alignable, the report names the attribute each driver would have to add,
but only for a driver whose devices have that level on this machine (a virtual interface has no
root; a device on a root port has no switch).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from topodra.common.check.attrs import (
    NUMA_NODE,
    PCIE_LEAF_SWITCH,
    PCIE_ROOT,
    PCIE_SWITCH,
    SOCKET,
    Value,
    own_meaning,
)
from topodra.common.check.devices import SliceDevice
from topodra.common.check.truth import Truth

LEVELS: tuple[tuple[str, str], ...] = (
    ("root", PCIE_ROOT),
    ("numa", NUMA_NODE),
    ("switch", PCIE_SWITCH),
    ("leaf", PCIE_LEAF_SWITCH),
    ("socket", SOCKET),
)
_PLACE = {
    "root": "PCIe root",
    "numa": "NUMA node",
    "switch": "PCIe switch",
    "leaf": "PCIe leaf switch",
    "socket": "socket",
}


@dataclass(frozen=True, slots=True)
class Placed:
    """A device with what the machine says about it and which of its values are bad."""

    device: SliceDevice
    truth: Truth
    bad: frozenset[str]  # attribute names whose value is wrong or malformed


@dataclass(frozen=True, slots=True)
class KeyResult:
    key: str
    standard: bool  # the level's own name (not a driver-domain one)
    a_devices: int  # devices of the first driver that publish it
    b_devices: int
    pairs: int  # device pairs whose values meet: what the scheduler may pick
    sound_pairs: int  # of those, pairs where neither value is wrong or malformed

    @property
    def alignable(self) -> bool:
        return self.pairs > 0


@dataclass(frozen=True, slots=True)
class LevelResult:
    level: str
    verdict: str  # "yes" | "no" | "false" (alignable only through bad values)
    via: str | None  # the name a claim should use, when alignable
    keys: tuple[KeyResult, ...]  # the level's name first, then shared driver-domain names
    machine: bool  # the machine has a device of each driver at one shared place of this level
    reason: str
    add: tuple[tuple[str, str], ...]  # (driver, attribute) that would align them (more)


@dataclass(frozen=True, slots=True)
class PairResult:
    a: str
    b: str
    levels: tuple[LevelResult, ...]


def align_all(drivers: Mapping[str, Sequence[Placed]]) -> tuple[PairResult, ...]:
    names = sorted(d for d, devs in drivers.items() if devs)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            out.append(align_pair(a, drivers[a], b, drivers[b]))
    return tuple(out)


def align_pair(a: str, devs_a: Sequence[Placed], b: str, devs_b: Sequence[Placed]) -> PairResult:
    levels = []
    for level, standard in LEVELS:
        keys = [standard, *_shared_own_keys(level, devs_a, devs_b)]
        results = tuple(_key_result(k, k == standard, devs_a, devs_b) for k in keys)
        levels.append(_level(level, standard, results, a, devs_a, b, devs_b))
    return PairResult(a, b, tuple(levels))


def _shared_own_keys(level: str, devs_a: Sequence[Placed], devs_b: Sequence[Placed]) -> list[str]:
    names_a = {n for p in devs_a for n in p.device.attributes if own_meaning(n) == level}
    names_b = {n for p in devs_b for n in p.device.attributes if own_meaning(n) == level}
    return sorted(names_a & names_b)


def _signatures(key: str, devs: Sequence[Placed]) -> Counter[tuple[str, frozenset[object], bool]]:
    """Devices grouped by (type, values, sound): pairs are counted group by group."""
    out: Counter[tuple[str, frozenset[object], bool]] = Counter()
    for p in devs:
        v: Value | None = p.device.attributes.get(key)
        if v is None or v.kind == "invalid":
            continue
        out[(v.base, frozenset(v.items), key not in p.bad)] += 1
    return out


def _key_result(key: str, standard: bool, devs_a: Sequence[Placed], devs_b: Sequence[Placed]) -> KeyResult:
    sig_a, sig_b = _signatures(key, devs_a), _signatures(key, devs_b)
    pairs = sound = 0
    for (base_a, vals_a, ok_a), n_a in sig_a.items():
        for (base_b, vals_b, ok_b), n_b in sig_b.items():
            if base_a == base_b and vals_a & vals_b:
                pairs += n_a * n_b
                if ok_a and ok_b:
                    sound += n_a * n_b
    return KeyResult(key, standard, sum(sig_a.values()), sum(sig_b.values()), pairs, sound)


def _places(level: str, t: Truth) -> set[object]:
    if not t.found:
        return set()
    if level == "root":
        if t.is_pci:
            return {t.pcie_root} if t.pcie_root else set()
        return set(t.local_roots)
    if level == "numa":
        return {t.numa} if t.numa is not None else set()
    if level == "switch":
        return {t.switch} if t.is_pci and t.switch else set()
    if level == "leaf":
        return {t.leaf_switch} if t.is_pci and t.leaf_switch else set()
    return {t.socket} if t.socket is not None else set()


def _level(
    level: str,
    standard: str,
    keys: tuple[KeyResult, ...],
    a: str,
    devs_a: Sequence[Placed],
    b: str,
    devs_b: Sequence[Placed],
) -> LevelResult:
    place = _PLACE[level]
    places_a = set().union(*(_places(level, p.truth) for p in devs_a))
    places_b = set().union(*(_places(level, p.truth) for p in devs_b))
    machine = bool(places_a & places_b)
    lacking = [d for d, devs in ((a, devs_a), (b, devs_b)) if not _publishes(devs, standard)]
    no_place = [d for d, has in ((a, places_a), (b, places_b)) if not has]
    # adding the name helps only where the machine has a place with devices of both
    add = tuple((d, standard) for d in lacking) if machine else ()
    best = next((k for k in keys if k.alignable), None)
    if best is not None:
        if best.sound_pairs == 0:
            reason = f"{best.key} values meet only where they are wrong or malformed: such claims land wrong"
            return LevelResult(level, "false", best.key, keys, machine, reason, add)
        reason = "" if best.standard else f"only through {best.key}, not the standard name {standard}"
        return LevelResult(level, "yes", best.key, keys, machine, reason, add)
    reasons = [f"{d} publishes no {standard}" for d in lacking]
    if no_place:
        reasons += [f"{d}'s devices have no {place} on this machine" for d in no_place]
    elif not machine:
        reasons.append(f"no device of {a} shares a {place} with a device of {b} on this machine")
    elif not lacking:
        reasons.append(
            f"the published {standard} values never meet, though the machine has a {place} with both"
        )
    reason = "; ".join(reasons)
    return LevelResult(level, "no", None, keys, machine, reason, add)


def _publishes(devs: Sequence[Placed], key: str) -> bool:
    return any(key in p.device.attributes for p in devs)
