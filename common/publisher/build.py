"""Desired ResourceSlices for one node-local pool, as a pure function of the driver's devices.

Everything here is deterministic so that `topodra slices` prints exactly what the publisher
writes, and so that a restarted driver computes the same slices and adopts the stored ones
instead of rewriting them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from topodra.common.device import Device
from topodra.common.publisher.validation import DEFAULT_LIMITS, Limits, Problem, validate

API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES = 128  # ResourceSliceMaxDevices
MAX_DEVICES_ADVANCED = 64  # ...WithAdvancedFeatures: taints, list attributes
# The API server appends 5 random characters to generateName and keeps names ≤63, so it cuts
# longer prefixes to 58 (docs/design/resourceslices.md; not verified on every release); we cut
# the same way so our output is exact.
GENERATE_NAME_MAX = 58
INDEX_WIDTH_MIN = 5
PLACEHOLDER_NODE_UID = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True, slots=True)
class Desired:
    """What would be published and what validation left out."""

    slices: tuple[dict[str, Any], ...]
    problems: tuple[Problem, ...]
    devices: tuple[Device, ...]  # the published devices, in slice order


def chunk_devices(devices: Sequence[Device]) -> list[list[Device]]:
    """Split in the given order; a chunk holding any advanced device is limited to 64.

    Greedy and order-preserving, so appending a device touches only the last slice and a change
    of one device touches only the slice that holds it.
    """
    chunks: list[list[Device]] = []
    current: list[Device] = []
    advanced = False
    for device in devices:
        would_be_advanced = advanced or device.uses_advanced_features
        limit = MAX_DEVICES_ADVANCED if would_be_advanced else MAX_DEVICES
        if current and len(current) + 1 > limit:
            chunks.append(current)
            current, would_be_advanced = [], device.uses_advanced_features
        current.append(device)
        advanced = would_be_advanced
    if current:
        chunks.append(current)
    return chunks


def index_width(num_slices: int) -> int:
    return max(INDEX_WIDTH_MIN, len(f"{max(num_slices - 1, 0):x}"))


def generate_name(index: int, num_slices: int, driver_name: str, node_name: str) -> str:
    """`<index>-<driver>-<node>-` with a zero-padded lowercase hex index (1.36+ helper scheme)."""
    prefix = f"{index:0{index_width(num_slices)}x}-{driver_name}-{node_name}-"
    return prefix[:GENERATE_NAME_MAX]


_INDEX = re.compile(r"([0-9a-f]{5,})-")


def decode_index(name: str, driver_name: str, node_name: str) -> int | None:
    """The slice index encoded in a name we generated, None for any other name.

    The remainder must match our `<driver>-<node>-` (cut like the server cuts it), so that a
    pre-1.36 name such as `cafe1-<driver>-xxxxx` is not mistaken for index 0xcafe1.
    """
    match = _INDEX.match(name)
    if match is None:
        return None
    digits = match.group(1)
    expected = f"{digits}-{driver_name}-{node_name}-"[:GENERATE_NAME_MAX]
    if not name.startswith(expected) or len(name) <= len(expected):
        return None
    return int(digits, 16)


def owner_reference(node_name: str, node_uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}


def slice_specs(driver_name: str, node_name: str, devices: Sequence[Device]) -> list[dict[str, Any]]:
    """The `spec` of each desired slice without pool generation/count (those are sync decisions)."""
    specs: list[dict[str, Any]] = []
    base = {"driver": driver_name, "pool": {"name": node_name}, "nodeName": node_name}
    for chunk in chunk_devices(devices):
        specs.append({**base, "devices": [d.to_api() for d in chunk]})
    if not specs:
        specs.append({**base, "devices": []})  # an empty pool says "driver running, no devices"
    return specs


def slice_object(
    spec: dict[str, Any],
    index: int,
    num_slices: int,
    generation: int,
    node_uid: str,
) -> dict[str, Any]:
    """A complete ResourceSlice for `create`, with the pool generation and count filled in."""
    driver_name, node_name = spec["driver"], spec["nodeName"]
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {
            "generateName": generate_name(index, num_slices, driver_name, node_name),
            "ownerReferences": [owner_reference(node_name, node_uid)],
        },
        "spec": with_pool(spec, generation, num_slices),
    }


def with_pool(spec: Mapping[str, Any], generation: int, num_slices: int) -> dict[str, Any]:
    pool = {**spec["pool"], "generation": generation, "resourceSliceCount": num_slices}
    return {**spec, "pool": pool}


def build_desired(
    driver_name: str,
    node_name: str,
    node_uid: str | None,
    devices: Sequence[Device],
    *,
    generation: int = 1,
    limits: Limits = DEFAULT_LIMITS,
) -> Desired:
    """Validate, chunk and name: the slices a fresh pool at `generation` would have."""
    checked = validate(devices, limits)
    specs = slice_specs(driver_name, node_name, checked.devices)
    uid = node_uid or PLACEHOLDER_NODE_UID
    slices = tuple(slice_object(spec, i, len(specs), generation, uid) for i, spec in enumerate(specs))
    return Desired(slices, checked.problems, checked.devices)


def build_slices(
    driver_name: str,
    node_name: str,
    node_uid: str | None,
    devices: Sequence[Device],
    *,
    generation: int = 1,
    limits: Limits = DEFAULT_LIMITS,
) -> list[dict[str, Any]]:
    """The desired slices only (problems are in `build_desired(...).problems`).

    Without a node UID (no cluster, e.g. `topodra slices`) the owner reference carries
    PLACEHOLDER_NODE_UID; the publisher always looks the real UID up.
    """
    desired = build_desired(
        driver_name,
        node_name,
        node_uid,
        devices,
        generation=generation,
        limits=limits,
    )
    return list(desired.slices)
