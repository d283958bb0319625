"""A device as a driver publishes it in a ResourceSlice (resource.k8s.io/v1).

Drivers build these from the topology; the publisher validates, chunks and writes them; the
runtime looks allocated names up in them. Keeping one typed shape lets slice building stay a pure
function that tests compare without a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Version:
    """A semver attribute value; a distinct type so it is not published as a plain string."""

    value: str


# Scalars: bool, int, str, Version. Lists (DRAListTypeAttributes): tuples of one of those.
AttributeValue = (
    bool | int | str | Version | tuple[int, ...] | tuple[str, ...] | tuple[bool, ...] | tuple[Version, ...]
)


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """CapacityRequestPolicy: how much of a consumable capacity one allocation may take."""

    default: str
    valid_values: tuple[str, ...] = ()
    min: str | None = None
    max: str | None = None
    step: str | None = None

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"default": self.default}
        if self.valid_values:
            out["validValues"] = list(self.valid_values)
        if self.min is not None:
            rng: dict[str, Any] = {"min": self.min}
            if self.max is not None:
                rng["max"] = self.max
            if self.step is not None:
                rng["step"] = self.step
            out["validRange"] = rng
        return out


@dataclass(frozen=True, slots=True)
class Capacity:
    value: str  # a Kubernetes quantity, e.g. "8" or "80Gi"
    request_policy: RequestPolicy | None = None

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value}
        if self.request_policy is not None:
            out["requestPolicy"] = self.request_policy.to_api()
        return out


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # None | NoSchedule | NoExecute

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out


def attribute_to_api(value: AttributeValue) -> dict[str, Any]:
    """Encode one attribute value as the API's one-of (`int`, `bool`, `string`, `version`, lists)."""
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, str):
        return {"string": value}
    if isinstance(value, Version):
        return {"version": value.value}
    if isinstance(value, tuple):
        if value and all(isinstance(v, bool) for v in value):
            return {"bools": list(value)}
        if value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return {"ints": list(value)}
        if value and all(isinstance(v, str) for v in value):
            return {"strings": list(value)}
        if value and all(isinstance(v, Version) for v in value):
            return {"versions": [v.value for v in value if isinstance(v, Version)]}
        raise ValueError(f"list attribute must be a non-empty list of one type, got {value!r}")
    raise TypeError(f"unsupported attribute value {value!r}")


def is_list_attribute(value: AttributeValue) -> bool:
    return isinstance(value, tuple)


@dataclass(frozen=True, slots=True)
class NodeAllocatable:
    """How one allocation of a device counts against a node-allocatable resource (`cpu`, ...),
    so the scheduler and the kubelet do not count the same CPUs again through pods' requests
    (1.37 `nodeAllocatableResources`, alpha gate DRANodeAllocatableResources): either so much per
    allocated device, or the consumed amount of one of its capacities times a factor."""

    device_multiplier: str | None = None  # a quantity per allocated device
    capacity_key: str | None = None  # a key of the device's capacity
    capacity_multiplier: str | None = None  # a quantity per unit of that capacity consumed

    def to_api(self) -> dict[str, Any]:
        mapping: dict[str, str] = {}
        if self.device_multiplier is not None:
            mapping["deviceMultiplier"] = self.device_multiplier
        if self.capacity_key is not None:
            mapping["capacityKey"] = self.capacity_key
        if self.capacity_multiplier is not None:
            mapping["capacityMultiplier"] = self.capacity_multiplier
        return {"mapping": mapping}


@dataclass(frozen=True, slots=True)
class Device:
    """One device entry of a ResourceSlice; attribute and capacity keys are fully qualified."""

    name: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    capacity: Mapping[str, Capacity] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allow_multiple_allocations: bool = False
    node_allocatable: Mapping[str, NodeAllocatable] = field(default_factory=dict)  # by resource (cpu)

    @property
    def uses_advanced_features(self) -> bool:
        """Taints or list attributes lower the per-slice limit from 128 to 64."""
        return bool(self.taints) or any(is_list_attribute(v) for v in self.attributes.values())

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.attributes:
            out["attributes"] = {k: attribute_to_api(v) for k, v in sorted(self.attributes.items())}
        if self.capacity:
            out["capacity"] = {k: c.to_api() for k, c in sorted(self.capacity.items())}
        if self.taints:
            out["taints"] = [t.to_api() for t in self.taints]
        if self.allow_multiple_allocations:
            out["allowMultipleAllocations"] = True
        if self.node_allocatable:
            mappings = sorted(self.node_allocatable.items())
            out["nodeAllocatableResources"] = {k: m.to_api() for k, m in mappings}
        return out


def _attribute_from_api(value: Mapping[str, Any]) -> AttributeValue:
    if "bool" in value:
        return bool(value["bool"])
    if "int" in value:
        return int(value["int"])
    if "string" in value:
        return str(value["string"])
    if "version" in value:
        return Version(str(value["version"]))
    if "bools" in value:
        return tuple(bool(v) for v in value["bools"])
    if "ints" in value:
        return tuple(int(v) for v in value["ints"])
    if "strings" in value:
        return tuple(str(v) for v in value["strings"])
    if "versions" in value:
        return tuple(Version(str(v)) for v in value["versions"])
    raise ValueError(f"attribute value without a known field: {dict(value)!r}")


def _policy_from_api(data: Mapping[str, Any]) -> RequestPolicy:
    rng = data.get("validRange") or {}
    return RequestPolicy(
        default=str(data["default"]),
        valid_values=tuple(str(v) for v in data.get("validValues") or ()),
        min=str(rng["min"]) if "min" in rng else None,
        max=str(rng["max"]) if "max" in rng else None,
        step=str(rng["step"]) if "step" in rng else None,
    )


def device_from_api(data: Mapping[str, Any]) -> Device:
    """Inverse of `Device.to_api` (drivers keep published devices in their checkpoint state, to
    go on publishing an allocated device the host no longer shows). Raises KeyError, TypeError
    or ValueError on data that `to_api` cannot have written."""
    capacity = {}
    for key, cap in (data.get("capacity") or {}).items():
        policy = cap.get("requestPolicy")
        capacity[str(key)] = Capacity(str(cap["value"]), _policy_from_api(policy) if policy else None)
    return Device(
        name=str(data["name"]),
        attributes={str(k): _attribute_from_api(v) for k, v in (data.get("attributes") or {}).items()},
        capacity=capacity,
        taints=tuple(
            Taint(str(t["key"]), str(t.get("value", "")), str(t.get("effect", "NoSchedule")))
            for t in data.get("taints") or ()
        ),
        allow_multiple_allocations=bool(data.get("allowMultipleAllocations", False)),
        node_allocatable={
            str(k): _node_allocatable_from_api(v)
            for k, v in (data.get("nodeAllocatableResources") or {}).items()
        },
    )


def _node_allocatable_from_api(data: Mapping[str, Any]) -> NodeAllocatable:
    m = data.get("mapping") or {}
    return NodeAllocatable(
        device_multiplier=str(m["deviceMultiplier"]) if "deviceMultiplier" in m else None,
        capacity_key=str(m["capacityKey"]) if "capacityKey" in m else None,
        capacity_multiplier=str(m["capacityMultiplier"]) if "capacityMultiplier" in m else None,
    )
