"""Semantic comparison of a desired slice spec with what the API server stored.

"Nothing changed" must hold across restarts and after the server's own rewriting, or every sync
would write. The server changes a slice we sent in three ways that do not change its meaning:
quantities come back in canonical form ("1000m" -> "1"), taints gain `timeAdded`, and empty
or false optional fields are omitted. A field guarded by a disabled feature gate is silently
dropped (docs/design/resourceslices.md); that one does change the meaning, so it is detected and reported, and
then expected, so that we do not rewrite forever.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from topodra.common.publisher import quantity

# Features whose fields the server drops when their gate is off, and how we spot each.
TAINTS = "DRADeviceTaints"
CONSUMABLE = "DRAConsumableCapacity"
LIST_ATTRIBUTES = "DRAListTypeAttributes"
NODE_ALLOCATABLE = "DRANodeAllocatableResources"

_DEVICE_FIELDS = {
    "taints": TAINTS,
    "allowMultipleAllocations": CONSUMABLE,
    "nodeAllocatableResources": NODE_ALLOCATABLE,
}
_LIST_KEYS = ("ints", "bools", "strings", "versions")
_FALSE_MEANS_ABSENT = ("allowMultipleAllocations", "bindsToNode", "allNodes")


def normalize_spec(spec: Mapping[str, Any], *, ignore_taint_time: bool = False) -> dict[str, Any]:
    """A comparable form: quantities as exact numbers, omitted-when-empty fields dropped."""
    out: dict[str, Any] = _strip_empty(copy.deepcopy(dict(spec)))
    for device in out.get("devices", []):
        for cap in device.get("capacity", {}).values():
            _quantities_in_capacity(cap)
        for taint in device.get("taints", []):
            if ignore_taint_time:
                taint.pop("timeAdded", None)
    return out


def same_spec(desired: Mapping[str, Any], stored: Mapping[str, Any]) -> bool:
    """True when writing `desired` would not change what consumers of `stored` see.

    Taint times: we never set `timeAdded`, the server does; they are adopted, not compared.
    """
    return normalize_spec(desired, ignore_taint_time=True) == normalize_spec(stored, ignore_taint_time=True)


def adopt_server_fields(desired: Mapping[str, Any], stored: Mapping[str, Any]) -> dict[str, Any]:
    """`desired` with the server's taint `timeAdded` copied over for unchanged taints.

    An update that omitted them would make the server stamp a new time on every write.
    """
    out = copy.deepcopy(dict(desired))
    stored_devices = {d.get("name"): d for d in stored.get("devices") or []}
    for device in out.get("devices", []):
        old = stored_devices.get(device.get("name"))
        if not old or not device.get("taints"):
            continue
        times = {_taint_id(t): t["timeAdded"] for t in old.get("taints") or [] if t.get("timeAdded")}
        for taint in device["taints"]:
            if "timeAdded" not in taint and _taint_id(taint) in times:
                taint["timeAdded"] = times[_taint_id(taint)]
    return out


def dropped_features(sent: Mapping[str, Any], stored: Mapping[str, Any]) -> set[str]:
    """Features whose fields we sent but the server did not store (gate off on the server)."""
    features: set[str] = set()
    stored_devices = {d.get("name"): d for d in stored.get("devices") or []}
    for device in sent.get("devices") or []:
        old = stored_devices.get(device.get("name"))
        if old is None:
            continue
        for field, feature in _DEVICE_FIELDS.items():
            if _present(device.get(field)) and not _present(old.get(field)):
                features.add(feature)
        old_attrs = old.get("attributes") or {}
        for key, value in (device.get("attributes") or {}).items():
            if any(k in value for k in _LIST_KEYS) and key not in old_attrs:
                features.add(LIST_ATTRIBUTES)  # stored without it: published while the gate was off
        old_caps = old.get("capacity") or {}
        for key, cap in (device.get("capacity") or {}).items():
            if cap.get("requestPolicy") and not (old_caps.get(key) or {}).get("requestPolicy"):
                features.add(CONSUMABLE)
    return features


def strip_features(spec: Mapping[str, Any], features: Iterable[str]) -> dict[str, Any]:
    """What the server will store of `spec` when these features are off.

    Used both to stop rewriting a slice whose fields are dropped anyway and, for list
    attributes (whose loss makes the write fail rather than drop), to publish without them.
    """
    off = set(features)
    out = copy.deepcopy(dict(spec))
    if not off:
        return out
    for device in out.get("devices", []):
        for field, feature in _DEVICE_FIELDS.items():
            if feature in off:
                device.pop(field, None)
        if CONSUMABLE in off:
            for cap in (device.get("capacity") or {}).values():
                cap.pop("requestPolicy", None)
        if LIST_ATTRIBUTES in off and "attributes" in device:
            device["attributes"] = {
                k: v for k, v in device["attributes"].items() if not any(x in v for x in _LIST_KEYS)
            }
            if not device["attributes"]:
                del device["attributes"]
    return out


def _taint_id(taint: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    return taint.get("key"), taint.get("value", ""), taint.get("effect")


def _present(value: Any) -> bool:
    return value is not None and value is not False and value != [] and value != {}


def _strip_empty(value: Any) -> Any:
    """Drop None, empty containers and false-means-absent booleans (the server omits them)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            v = _strip_empty(v)
            if v is None or v == {} or v == [] or (k in _FALSE_MEANS_ABSENT and v is False):
                continue
            if k == "value" and v == "" and isinstance(value.get("key"), str):
                continue  # a taint without value
            out[k] = v
        return out
    if isinstance(value, list):
        return [_strip_empty(v) for v in value]
    return value


def _q(text: Any) -> Any:
    if isinstance(text, str):
        try:
            return ("quantity", quantity.parse(text))
        except quantity.QuantityError:
            return text
    return text


def _quantities_in_capacity(cap: dict[str, Any]) -> None:
    if "value" in cap:
        cap["value"] = _q(cap["value"])
    policy = cap.get("requestPolicy")
    if not policy:
        return
    if "default" in policy:
        policy["default"] = _q(policy["default"])
    if "validValues" in policy:
        policy["validValues"] = [_q(v) for v in policy["validValues"]]
    rng = policy.get("validRange")
    if rng:
        for key in ("min", "max", "step"):
            if key in rng:
                rng[key] = _q(rng[key])
