"""The devices a node's ResourceSlices offer, per driver, as a consumer sees them.

Consumers use only the slices of a pool's highest generation (the API's rule), so older slices left
behind during a republish are ignored here too; a pool that has fewer slices than its
`resourceSliceCount` is being rewritten and is noted. Slices not tied to one node (`nodeSelector`,
`allNodes`, per-device node selection) are outside a node check and only counted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from topodra.common.check.attrs import Value, parse_value, qualify

MAX_DEVICES = 100_000  # per node, all drivers: a real node publishes a few thousand at most
MAX_ATTRIBUTES = 256  # per device; the API allows 32 attributes and capacities together


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One device of one driver's pool, attributes under qualified names."""

    driver: str
    pool: str
    name: str
    attributes: Mapping[str, Value]


@dataclass(frozen=True, slots=True)
class NodeDevices:
    node: str
    drivers: Mapping[str, tuple[SliceDevice, ...]]  # driver -> devices, drivers sorted by name
    notes: tuple[str, ...]  # what was skipped and why


class SliceInputError(ValueError):
    """The slices cannot be read as a node's slices (e.g. several nodes and none chosen)."""


def nodes_of(slices: Iterable[Mapping[str, Any]]) -> list[str]:
    """The node names the slices are tied to, sorted."""
    return sorted({n for s in slices if isinstance(n := _spec(s).get("nodeName"), str) and n})


def node_devices(slices: Iterable[Mapping[str, Any]], node: str | None) -> NodeDevices:
    """The devices on `node` (None: the only node the slices name)."""
    slices = list(slices)
    if node is None:
        names = nodes_of(slices)
        if len(names) != 1:
            found = ", ".join(names[:8]) + (" ..." if len(names) > 8 else "") if names else "none"
            raise SliceInputError(f"the slices name {len(names)} nodes ({found}): choose one with --node")
        node = names[0]
    notes: list[str] = []
    unbound = 0
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for s in slices:
        spec = _spec(s)
        if spec.get("nodeName") != node:
            if not spec.get("nodeName") and spec.get("driver"):
                unbound += 1
            continue
        driver, pool = spec.get("driver"), _pool(spec).get("name")
        if not isinstance(driver, str) or not driver or not isinstance(pool, str):
            notes.append(f"slice {_name(s)}: no driver or pool name; skipped")
            continue
        pools[(driver, pool)].append(s)
    if unbound:
        notes.append(f"{unbound} slice(s) not tied to a node (nodeSelector/allNodes) are not checked")
    by_driver: dict[str, list[SliceDevice]] = defaultdict(list)
    total = 0
    for (driver, pool), members in sorted(pools.items()):
        newest = max(_generation(s) for s in members)
        current = [s for s in members if _generation(s) == newest]
        if len(current) < len(members):
            notes.append(
                f"{driver} pool {pool}: {len(members) - len(current)} slice(s) of an older generation ignored"
            )
        expected = _pool(_spec(current[0])).get("resourceSliceCount")
        if isinstance(expected, int) and len(current) < expected:
            notes.append(
                f"{driver} pool {pool}: {len(current)} of {expected} slices present (being republished?)"
            )
        for s in current:
            for raw in _spec(s).get("devices") or []:
                if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
                    notes.append(f"slice {_name(s)}: a device without a name; skipped")
                    continue
                total += 1
                if total > MAX_DEVICES:
                    raise SliceInputError(f"more than {MAX_DEVICES} devices on node {node}")
                by_driver[driver].append(_device(driver, pool, raw))
    if not pools:
        notes.append(f"no ResourceSlice names node {node}: nothing to check")
    drivers = {
        d: tuple(sorted(devs, key=lambda x: (x.pool, x.name))) for d, devs in sorted(by_driver.items())
    }
    return NodeDevices(node, drivers, tuple(notes))


def _device(driver: str, pool: str, raw: Mapping[str, Any]) -> SliceDevice:
    attrs = raw.get("attributes")
    parsed: dict[str, Value] = {}
    if isinstance(attrs, Mapping):
        if len(attrs) > MAX_ATTRIBUTES:
            raise SliceInputError(
                f"{driver} device {raw['name']}: {len(attrs)} attributes (the API allows 32)"
            )
        for name, value in attrs.items():
            parsed[qualify(driver, str(name))] = parse_value(value)
    return SliceDevice(driver, pool, raw["name"], parsed)


def _spec(s: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = s.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _pool(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    pool = spec.get("pool")
    return pool if isinstance(pool, Mapping) else {}


def _generation(s: Mapping[str, Any]) -> int:
    g = _pool(_spec(s)).get("generation")
    return g if isinstance(g, int) else 0


def _name(s: Mapping[str, Any]) -> str:
    meta = s.get("metadata")
    if isinstance(meta, Mapping):
        return str(meta.get("name") or meta.get("generateName") or "?")
    return "?"
