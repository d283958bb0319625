"""The locality level of each accelerator-NIC pair of an allocation (or of a fit).

Levels nest: one PCIe switch, one root complex, one NUMA node, one socket, none; where switches
are nested, one leaf switch comes first (the same leaf below the outermost switch: nvidia-smi
PIX, as `topodra inspect`'s LEAF, common/topology/locality.py). A claim that
does not say which NIC serves which accelerator (a count request, a group) is read with the best
one-to-one pairing, as the placement study scores it; the subrequest the allocation recorded
("accelerator-0/root") is reported beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from topodra.common.explain.inventory import Device

ACCELERATOR = "accelerator.topodra.io"
NIC = "nic.topodra.io"
LEAF = "leaf"
LEAF_KEY, SWITCH_KEY = "topology.topodra.io/pcieLeafSwitch", "topology.topodra.io/pcieSwitch"
LEVELS = (
    ("switch", SWITCH_KEY),
    ("root", "resource.kubernetes.io/pcieRoot"),
    ("numa", "resource.kubernetes.io/numaNode"),
    ("socket", "topology.topodra.io/socket"),
)
NONE = "none"
MAX_PAIRING = 16  # NICs the exhaustive pairing considers


@dataclass(frozen=True, slots=True)
class Pair:
    accelerator: str
    nic: str | None
    level: str  # leaf | switch | root | numa | socket | none | "no NIC"
    recorded: str | None  # the subrequest the allocation names for the accelerator


def _shared(a: Device, b: Device, key: str) -> bool:
    x, y = a.attr(key), b.attr(key)
    return x is not None and y is not None and x.kind != "invalid" and bool(set(x.items) & set(y.items))


def level(a: Device, b: Device) -> str:
    if _shared(a, b, LEAF_KEY):
        leaf, top = a.attr(LEAF_KEY), a.attr(SWITCH_KEY)
        if top is None or leaf is None or set(leaf.items) != set(top.items):  # a nested leaf
            return LEAF
    for name, key in LEVELS:
        if _shared(a, b, key):
            return name
    return NONE


_RANKS = (LEAF, *(n for n, _ in LEVELS), NONE)


def _rank(name: str) -> int:
    return _RANKS.index(name)


def pairs(results: Sequence[tuple[str, Device]]) -> list[Pair]:
    """Best one-to-one pairing of the accelerators with the NICs among `results`."""
    accs = [(r, d) for r, d in results if d.driver == ACCELERATOR]
    nics = [d for _, d in results if d.driver == NIC][:MAX_PAIRING]
    best: dict[int, tuple[int, tuple[int, ...]]] = {0: (0, ())}
    for _, acc in accs[: len(nics)]:
        nxt: dict[int, tuple[int, tuple[int, ...]]] = {}
        for mask, (cost, chosen) in best.items():
            for j, nic in enumerate(nics):
                if mask & (1 << j):
                    continue
                cand = (cost + _rank(level(acc, nic)), (*chosen, j))
                if mask | (1 << j) not in nxt or cand < nxt[mask | (1 << j)]:
                    nxt[mask | (1 << j)] = cand
        best = nxt
    chosen = min(best.values())[1] if best else ()
    out = []
    for i, (request, acc) in enumerate(accs):
        recorded = request.partition("/")[2] or None
        if i < len(chosen):
            nic = nics[chosen[i]]
            out.append(Pair(acc.name, nic.name, level(acc, nic), recorded))
        else:
            out.append(Pair(acc.name, None, "no NIC", recorded))
    return out
