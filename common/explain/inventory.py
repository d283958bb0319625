"""A node's devices as the allocator sees them, and what other claims already hold of them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from topodra.common.check.attrs import Value
from topodra.common.check.devices import node_devices


@dataclass(frozen=True, slots=True)
class Device:
    driver: str
    pool: str
    name: str
    attributes: Mapping[str, Value]  # qualified name -> value
    capacity: Mapping[str, Decimal]  # qualified name -> amount
    shared: bool  # allowMultipleAllocations: several claims (and requests) may take capacity of it

    @property
    def id(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)

    def attr(self, name: str) -> Value | None:
        return self.attributes.get(name)


@dataclass
class InUse:
    """Devices other claims hold on the node: whole devices, and capacity taken of shared ones."""

    devices: set[tuple[str, str, str]] = field(default_factory=set)
    capacity: dict[tuple[str, str, str], dict[str, Decimal]] = field(default_factory=dict)


def quantity(text: Any) -> Decimal | None:
    """A resource quantity as a number: plain and decimal-suffixed forms ("4", "1500m", "2Gi")."""
    s = str(text).strip()
    suffixes = {
        "m": Decimal("0.001"), "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9,
        "T": Decimal(10) ** 12, "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
        "Ti": Decimal(2) ** 40,
    }  # fmt: skip
    for suffix in sorted(suffixes, key=len, reverse=True):
        if s.endswith(suffix):
            try:
                return Decimal(s[: -len(suffix)]) * suffixes[suffix]
            except InvalidOperation:
                return None
    try:
        return Decimal(s)
    except InvalidOperation:
        return None


def node_inventory(
    slices: Iterable[Mapping[str, Any]], node: str | None
) -> tuple[str, list[Device], list[str]]:
    """(node, its devices in the allocator's order, notes) from slices of one or more nodes."""
    slices = list(slices)
    found = node_devices(slices, node)
    wanted = {(d.driver, d.pool, d.name): d for devs in found.drivers.values() for d in devs}
    raw: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("nodeName") != found.node:
            continue
        pool = (spec.get("pool") or {}).get("name")
        for d in spec.get("devices") or []:
            if isinstance(d, Mapping):
                raw.setdefault((str(spec.get("driver")), str(pool), str(d.get("name"))), d)
    devices: list[Device] = []
    for key in sorted(wanted):  # pools, then devices in name order: as the allocator walks them
        d, body = wanted[key], raw.get(key, {})
        capacity: dict[str, Decimal] = {}
        for name, c in (body.get("capacity") or {}).items():
            amount = quantity((c or {}).get("value")) if isinstance(c, Mapping) else None
            if amount is not None:
                capacity[name if "/" in name else f"{d.driver}/{name}"] = amount
        devices.append(
            Device(
                d.driver, d.pool, d.name, d.attributes, capacity, bool(body.get("allowMultipleAllocations"))
            )
        )
    return found.node, devices, list(found.notes)


def in_use(claims: Iterable[Mapping[str, Any]], node: str, skip: tuple[str, str] | None = None) -> InUse:
    """What allocated claims hold on `node` (claims allocated elsewhere and `skip` left out)."""
    out = InUse()
    for c in claims:
        meta = c.get("metadata") or {}
        if skip is not None and (meta.get("namespace"), meta.get("name")) == skip:
            continue
        alloc = (c.get("status") or {}).get("allocation") or {}
        for r in (alloc.get("devices") or {}).get("results") or []:
            if r.get("pool") != node and not _pool_on(alloc, node):
                continue
            key = (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            consumed = r.get("consumedCapacity")
            if r.get("shareID") is None and not consumed:
                out.devices.add(key)
                continue
            taken = out.capacity.setdefault(key, {})
            for name, amount in (consumed or {}).items():
                q = quantity(amount)
                if q is not None:
                    qualified = name if "/" in name else f"{key[0]}/{name}"
                    taken[qualified] = taken.get(qualified, Decimal(0)) + q
    return out


def _pool_on(alloc: Mapping[str, Any], node: str) -> bool:
    """Whether an allocation's node selector names `node` (pools need not be named after nodes)."""
    terms = ((alloc.get("nodeSelector") or {}).get("nodeSelectorTerms")) or []
    for t in terms:
        for f in t.get("matchFields") or []:
            if f.get("key") == "metadata.name" and node in (f.get("values") or []):
                return True
    return False
