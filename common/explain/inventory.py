"""A node's devices as the allocator sees them, and what other claims already hold of them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

from topodra.common.check.attrs import Value
from topodra.common.check.devices import node_devices
from topodra.common.publisher import quantity


@dataclass(frozen=True, slots=True)
class Device:
    driver: str
    pool: str
    name: str
    attributes: Mapping[str, Value]  # qualified name -> value
    capacity: Mapping[str, Fraction]  # qualified name -> amount
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
    capacity: dict[tuple[str, str, str], dict[str, Fraction]] = field(default_factory=dict)


def amount(text: Any) -> Fraction | None:
    """A quantity from a slice or a claim as the API server stores it (None: not a quantity)."""
    try:
        return quantity.parse(str(text))
    except quantity.QuantityError:
        return None


def show_amount(value: Fraction) -> str:
    """4, 1.5, 0.000000001: as people write quantities (values are whole nanos)."""
    if value.denominator == 1:
        return str(value.numerator)
    text = f"{Decimal(value.numerator) / Decimal(value.denominator):f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def node_inventory(
    slices: Iterable[Mapping[str, Any]], node: str | None
) -> tuple[str, list[Device], list[str]]:
    """(node, its devices in the allocator's order, notes) from slices of one or more nodes."""
    slices = list(slices)
    found = node_devices(slices, node)
    wanted = {(d.driver, d.pool, d.name): d for devs in found.drivers.values() for d in devs}
    raw: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for s in slices:
        spec = _m(s.get("spec"))
        if spec.get("nodeName") != found.node:
            continue
        pool = _m(spec.get("pool")).get("name")
        for d in _l(spec.get("devices")):
            if isinstance(d, Mapping):
                raw.setdefault((str(spec.get("driver")), str(pool), str(d.get("name"))), d)
    devices: list[Device] = []
    for key in sorted(wanted):  # pools, then devices in name order: as the allocator walks them
        d, body = wanted[key], raw.get(key, {})
        capacity: dict[str, Fraction] = {}
        for name, c in _m(body.get("capacity")).items():
            value = amount(c.get("value")) if isinstance(c, Mapping) else None
            if value is not None:
                capacity[name if "/" in name else f"{d.driver}/{name}"] = value
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
        meta = _m(c.get("metadata"))
        if skip is not None and (meta.get("namespace"), meta.get("name")) == skip:
            continue
        alloc = _m(_m(c.get("status")).get("allocation"))
        for r in _l(_m(alloc.get("devices")).get("results")):
            if not isinstance(r, Mapping):
                continue
            if r.get("pool") != node and not _pool_on(alloc, node):
                continue
            key = (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            consumed = r.get("consumedCapacity")
            if r.get("shareID") is None and not consumed:
                out.devices.add(key)
                continue
            taken = out.capacity.setdefault(key, {})
            for name, taken_text in _m(consumed).items():
                q = amount(taken_text)
                if q is not None:
                    qualified = name if "/" in name else f"{key[0]}/{name}"
                    taken[qualified] = taken.get(qualified, Fraction(0)) + q
    return out


def _pool_on(alloc: Mapping[str, Any], node: str) -> bool:
    """Whether an allocation's node selector names `node` (pools need not be named after nodes)."""
    for t in _l(_m(alloc.get("nodeSelector")).get("nodeSelectorTerms")):
        for f in _l(_m(t).get("matchFields")):
            if _m(f).get("key") == "metadata.name" and node in _l(_m(f).get("values")):
                return True
    return False


def _m(value: Any) -> Mapping[str, Any]:
    """A field that should be an object; anything else (a file may hold anything) reads as empty."""
    return value if isinstance(value, Mapping) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
