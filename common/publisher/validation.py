"""Pre-publish validation with the API server's limits (docs/design/resourceslices.md).

The API server rejects a ResourceSlice as a whole, so one bad attribute would hide every other
device of the slice. We check each device first and leave out only what is broken:

- an attribute whose own value or name is invalid is dropped and the device stays (the other
  attributes still describe it, and a missing attribute only makes selectors not match it);
- anything that changes what allocating the device means (its name, capacity, request policy,
  taints) or a count limit (where we cannot choose which attribute to sacrifice) drops
  the whole device: publishing it without a NoSchedule taint or with unaccounted capacity would
  let the scheduler hand out something it should not.

Every omission is returned as a `Problem` naming the device and the rule so the caller can log
it; the rest of the devices still publish.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from topodra.common.device import (
    AttributeValue,
    Capacity,
    Device,
    NodeAllocatable,
    RequestPolicy,
    Version,
)
from topodra.common.publisher import names, quantity

TAINT_EFFECTS = frozenset({"None", "NoSchedule", "NoExecute"})
INT64_MIN = -(2**63)


@dataclass(frozen=True, slots=True)
class Limits:
    """Numeric limits of the target API server; defaults are v1 HEAD (1.35+)."""

    attributes_and_capacities: int = 32
    attribute_values: int = 48  # 1.36+: list elements count one each
    string_length: int = 64
    list_attributes: bool = True  # False: DRAListTypeAttributes known to be off
    taints: int = 16  # 1.34: 4
    valid_values: int = 10


DEFAULT_LIMITS = Limits()
LIMITS_1_34 = Limits(taints=4, list_attributes=False)  # list attributes arrived in 1.36
LIMITS_1_35 = Limits(list_attributes=False)


def limits_for(version: str | None) -> Limits:
    """Limits of a given server minor version ("1.34", "v1.35.2"); HEAD when None or newer.

    From 1.36 list attributes exist but their gate (DRAListTypeAttributes) is alpha and off by
    default; the publisher detects that at the first write and then leaves them out.
    """
    if not version:
        return DEFAULT_LIMITS
    parts = version.lstrip("v").split(".")
    try:
        minor = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        raise ValueError(f"not a Kubernetes version: {version!r} (expected e.g. 1.34)") from None
    if minor < (1, 35):
        return LIMITS_1_34
    if minor < (1, 36):
        return LIMITS_1_35
    return DEFAULT_LIMITS


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing left out of the published slices, and why."""

    device: str  # device name
    rule: str  # stable identifier, e.g. "attribute-string-length"
    detail: str
    field: str = ""  # e.g. the attribute key
    action: str = "dropped-device"  # dropped-device | dropped-attribute

    def __str__(self) -> str:
        where = f" {self.field}" if self.field else ""
        return f"device {self.device!r}{where}: {self.rule}: {self.detail} ({self.action})"


@dataclass(frozen=True, slots=True)
class Validated:
    devices: tuple[Device, ...]
    problems: tuple[Problem, ...]


class _DeviceInvalid(Exception):
    def __init__(self, rule: str, detail: str, field: str = "") -> None:
        super().__init__(detail)
        self.rule = rule
        self.detail = detail
        self.field = field


def validate(devices: Sequence[Device], limits: Limits = DEFAULT_LIMITS) -> Validated:
    """Split the driver's devices into what may be published and the problems found."""
    problems: list[Problem] = []
    kept: list[Device] = []
    seen: set[str] = set()
    for device in devices:
        try:
            if device.name in seen:
                raise _DeviceInvalid("device-name-duplicate", "another device of this pool has this name")
            fixed, attr_problems = _validate_device(device, limits)
        except _DeviceInvalid as err:
            problems.append(Problem(device.name, err.rule, err.detail, err.field, "dropped-device"))
            continue
        seen.add(device.name)
        problems.extend(attr_problems)
        kept.append(fixed)
    return Validated(tuple(kept), tuple(problems))


def _validate_device(device: Device, limits: Limits) -> tuple[Device, list[Problem]]:
    if not names.is_dns_label(device.name):
        raise _DeviceInvalid("device-name-dns-label", "must be a DNS label (a-z, 0-9 and '-', ≤63)")
    problems: list[Problem] = []
    attributes: dict[str, AttributeValue] = {}
    for key, value in device.attributes.items():
        why = _attribute_problem(key, value, limits)
        if why is not None:
            problems.append(Problem(device.name, why[0], why[1], key, "dropped-attribute"))
        else:
            attributes[key] = value
    for key, cap in device.capacity.items():
        _check_capacity(key, cap, device.allow_multiple_allocations, limits)
    for resource, mapping in device.node_allocatable.items():
        _check_node_allocatable(resource, mapping, device)
    if key_clash := set(attributes) & set(device.capacity):
        raise _DeviceInvalid("attribute-capacity-same-name", "both attribute and capacity", min(key_clash))
    total = len(attributes) + len(device.capacity)
    if total > limits.attributes_and_capacities:
        raise _DeviceInvalid(
            "too-many-attributes",
            f"{total} attributes+capacities, the limit is {limits.attributes_and_capacities}",
        )
    values = sum(len(v) if isinstance(v, tuple) else 1 for v in attributes.values())
    if values > limits.attribute_values:
        raise _DeviceInvalid(
            "too-many-attribute-values", f"{values} attribute values, the limit is {limits.attribute_values}"
        )
    _check_taints(device, limits)
    if len(attributes) != len(device.attributes):
        device = replace(device, attributes=attributes)
    return device, problems


def _attribute_problem(key: str, value: AttributeValue, limits: Limits) -> tuple[str, str] | None:
    if (why := names.qualified_name_problem(key)) is not None:
        return "attribute-name-qualified", why
    if names.is_reserved_domain(key):
        ident = key.rpartition("/")[2]
        if not key.startswith(names.STANDARD_PREFIX) or ident not in names.STANDARD_ATTRIBUTES:
            return "attribute-name-reserved", "kubernetes.io domains hold only the standard attributes"
        if (why := _standard_attribute_problem(ident, value)) is not None:
            return "attribute-standard-format", why
    if isinstance(value, tuple):
        if not limits.list_attributes:
            return "attribute-list-disabled", "list-typed attributes need the DRAListTypeAttributes gate"
        if not value:
            return "attribute-list-empty", "a list attribute needs at least one value"
        kinds = {_kind(v) for v in value}
        if len(kinds) != 1:
            return "attribute-list-mixed", "all values of a list attribute must have one type"
        items: tuple[object, ...] = value
    else:
        items = (value,)
    for item in items:
        if (problem := _scalar_problem(item, limits)) is not None:
            return problem
    return None


def _kind(value: object) -> str:
    return "bool" if isinstance(value, bool) else type(value).__name__


def _scalar_problem(value: object, limits: Limits) -> tuple[str, str] | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        if not INT64_MIN <= value <= quantity.INT64_MAX:
            return "attribute-int-range", f"{value} does not fit int64"
        return None
    if isinstance(value, str):
        if len(value.encode()) > limits.string_length:
            return "attribute-string-length", f"string is longer than {limits.string_length} bytes"
        return None
    if isinstance(value, Version):
        if len(value.value.encode()) > limits.string_length:
            return "attribute-version-length", f"version is longer than {limits.string_length} bytes"
        if not names.is_semver(value.value):
            return "attribute-version-semver", f"{value.value!r} is not semver 2.0.0 (no 'v', no leading 0)"
        return None
    return "attribute-type", f"unsupported value type {type(value).__name__}"


def _standard_attribute_problem(ident: str, value: AttributeValue) -> str | None:
    if ident == "pciBusID":
        if not isinstance(value, str) or names.PCI_BUS_ID.fullmatch(value) is None:
            return "pciBusID must be a lowercase extended BDF string such as '0000:3b:00.0'"
    elif ident == "pcieRoot":
        # list form (DRAListTypeAttributes): CPUs are local to several roots (user asks #3)
        roots = value if isinstance(value, tuple) else (value,)
        if not roots or not all(isinstance(r, str) and names.PCIE_ROOT.fullmatch(r) for r in roots):
            return "pcieRoot must be a string (or string list) such as 'pci0000:00'"
    elif ident == "numaNode":
        nodes = value if isinstance(value, tuple) else (value,)
        ok = all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1024 for n in nodes)
        if not ok or not nodes:
            return "numaNode must be an int (or int list) in 0..1023; never -1"
    return None


# node-allocatable resources a mapping may name (the API takes node-allocatable names there, not
# extended resources)
_NODE_ALLOCATABLE = ("cpu", "memory", "ephemeral-storage")


def _check_node_allocatable(resource: str, mapping: NodeAllocatable, device: Device) -> None:
    rule = "node-allocatable"
    if resource not in _NODE_ALLOCATABLE and not resource.startswith("hugepages-"):
        raise _DeviceInvalid(rule, "only node-allocatable resources (cpu, memory, hugepages-*)", resource)
    by_capacity = mapping.capacity_key is not None or mapping.capacity_multiplier is not None
    if by_capacity == (mapping.device_multiplier is not None):
        raise _DeviceInvalid(rule, "either deviceMultiplier or capacityKey with capacityMultiplier", resource)
    if by_capacity and (mapping.capacity_key is None or mapping.capacity_multiplier is None):
        raise _DeviceInvalid(rule, "capacityKey and capacityMultiplier go together", resource)
    if mapping.capacity_key is not None and mapping.capacity_key not in device.capacity:
        raise _DeviceInvalid(rule, f"capacityKey {mapping.capacity_key} is not a capacity of it", resource)
    factor = mapping.capacity_multiplier if mapping.device_multiplier is None else mapping.device_multiplier
    if _quantity(str(factor), rule, resource) <= 0:
        raise _DeviceInvalid(rule, f"the multiplier {factor!r} must be positive", resource)


def _check_capacity(key: str, cap: Capacity, multiple: bool, limits: Limits) -> None:
    if (why := names.qualified_name_problem(key)) is not None:
        raise _DeviceInvalid("capacity-name-qualified", why, key)
    if names.is_reserved_domain(key):
        raise _DeviceInvalid("capacity-name-reserved", "kubernetes.io domains are reserved", key)
    total = _quantity(cap.value, "capacity-quantity", key)
    if total < 0:
        raise _DeviceInvalid("capacity-negative", f"{cap.value!r} is negative", key)
    policy = cap.request_policy
    if policy is None:
        return
    if not multiple:
        raise _DeviceInvalid(
            "capacity-request-policy-forbidden", "requestPolicy needs allowMultipleAllocations: true", key
        )
    _check_policy(key, policy, total, limits)


def _check_policy(key: str, policy: RequestPolicy, total: Fraction, limits: Limits) -> None:
    rule = "capacity-request-policy"
    default = _quantity(policy.default, rule, key)
    has_range = policy.min is not None
    if policy.valid_values and has_range:
        raise _DeviceInvalid(rule, "validValues and validRange are mutually exclusive", key)
    if (policy.max is not None or policy.step is not None) and not has_range:
        raise _DeviceInvalid(rule, "validRange max/step need min", key)
    if not 0 <= default <= total:
        raise _DeviceInvalid(rule, "default must be within 0..capacity", key)
    if policy.valid_values:
        values = [_quantity(v, rule, key) for v in policy.valid_values]
        if len(values) > limits.valid_values:
            raise _DeviceInvalid(rule, f"more than {limits.valid_values} validValues", key)
        if any(b <= a for a, b in itertools.pairwise(values)):
            raise _DeviceInvalid(rule, "validValues must be strictly ascending", key)
        if values[-1] > total or values[0] < 0:
            raise _DeviceInvalid(rule, "validValues must be within 0..capacity", key)
        if default not in values:
            raise _DeviceInvalid(rule, "validValues must contain the default", key)
    if policy.min is not None:
        low = _quantity(policy.min, rule, key)
        if not 0 <= low <= min(total, default):
            raise _DeviceInvalid(rule, "validRange.min must be ≤ capacity and ≤ default", key)
        high = _quantity(policy.max, rule, key) if policy.max is not None else None
        if high is not None and not (low <= high <= total and high >= default):
            raise _DeviceInvalid(rule, "validRange.max must be ≥ min, ≥ default and ≤ capacity", key)
        if policy.step is not None:
            step = _quantity(policy.step, rule, key)
            if step <= 0:
                raise _DeviceInvalid(rule, "validRange.step must be > 0", key)
            if low + step > total:
                raise _DeviceInvalid(rule, "validRange.min + step must be ≤ capacity", key)
            if (default - low) % step or (high is not None and (high - low) % step):
                raise _DeviceInvalid(rule, "default-min and max-min must be multiples of step", key)


def _check_taints(device: Device, limits: Limits) -> None:
    if len(device.taints) > limits.taints:
        raise _DeviceInvalid("too-many-taints", f"{len(device.taints)} taints, the limit is {limits.taints}")
    for taint in device.taints:
        if (why := names.label_key_problem(taint.key)) is not None:
            raise _DeviceInvalid("taint-key", why, taint.key)
        if not names.is_label_value(taint.value):
            raise _DeviceInvalid("taint-value", f"{taint.value!r} is not a label value", taint.key)
        if taint.effect not in TAINT_EFFECTS:
            raise _DeviceInvalid("taint-effect", f"bad effect {taint.effect!r}", taint.key)


def _quantity(text: str, rule: str, field: str) -> Fraction:
    try:
        value: Fraction = quantity.parse(text)
    except quantity.QuantityError as err:
        raise _DeviceInvalid(rule, str(err), field) from None
    return value
