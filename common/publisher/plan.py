"""One sync of a node-local pool as a pure decision: what to delete, update and create.

Follows the upstream helper's rules (docs/design/resourceslices.md) so the scheduler sees the
same pool semantics from us as from a Go driver:
- the pool generation starts at the highest stored one; it is kept when no slice is new and at
  most one slice changed (one slice can be swapped atomically), otherwise it goes up by one and
  every slice is rewritten with it and with `resourceSliceCount`;
- stored slices are matched to desired ones by the index in their name; slices of another
  pool, with an undecodable name, an index past the desired count or a duplicate index are
  obsolete and deleted first. One deliberate difference: a slice of an older generation at a
  needed index (left by a sync interrupted half-way, e.g. by a conflict) is updated instead of
  deleted and re-created, which would count as a new slice and bump the generation again.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from topodra.common.publisher.build import decode_index, owner_reference, slice_object, with_pool
from topodra.common.publisher.compare import (
    CONSUMABLE,
    LIST_ATTRIBUTES,
    adopt_server_fields,
    dropped_features,
    same_spec,
    strip_features,
)


@dataclass(frozen=True, slots=True)
class Delete:
    name: str
    uid: str
    resource_version: str
    reason: str


@dataclass(frozen=True, slots=True)
class SyncPlan:
    generation: int
    slice_count: int
    deletes: tuple[Delete, ...] = ()
    updates: tuple[dict[str, Any], ...] = ()  # complete objects for PUT (resourceVersion kept)
    creates: tuple[dict[str, Any], ...] = ()  # complete objects for POST (generateName)
    unchanged: tuple[str, ...] = field(default=())  # names of stored slices left alone

    @property
    def writes(self) -> int:
        return len(self.deletes) + len(self.updates) + len(self.creates)


def generation_of(obj: Mapping[str, Any]) -> int:
    return int(((obj.get("spec") or {}).get("pool") or {}).get("generation") or 0)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    return meta


def _has_owner(obj: Mapping[str, Any], node_name: str, node_uid: str) -> bool:
    return any(
        ref.get("kind") == "Node" and ref.get("name") == node_name and ref.get("uid") == node_uid
        for ref in _meta(obj).get("ownerReferences") or []
    )


def plan_sync(
    desired_specs: Sequence[Mapping[str, Any]],
    existing: Iterable[Mapping[str, Any]],
    *,
    driver_name: str,
    node_name: str,
    node_uid: str,
    disabled_features: Iterable[str] = (),
) -> SyncPlan:
    """Decide the writes that make the stored slices equal the desired ones (none if equal)."""
    off = set(disabled_features)
    # Compared as the server will store them; sent in full, so that a gate switched on since is
    # picked up at the next real change, except list attributes, whose loss fails the write.
    expected = [strip_features(spec, off) for spec in desired_specs]
    desired = [strip_features(spec, off & {LIST_ATTRIBUTES}) for spec in desired_specs]
    count = len(desired)
    deletes: list[Delete] = []
    in_pool: list[Mapping[str, Any]] = []
    for obj in sorted(existing, key=lambda o: str(_meta(o).get("name"))):
        spec = obj.get("spec") or {}
        if spec.get("driver") != driver_name or spec.get("nodeName") != node_name:
            continue  # not ours: the field selector should not even have returned it
        if (spec.get("pool") or {}).get("name") != node_name:
            deletes.append(_delete(obj, "slice of another pool"))
        else:
            in_pool.append(obj)

    stored_generation = max((generation_of(o) for o in in_pool), default=0)
    candidates: dict[int, list[Mapping[str, Any]]] = {}
    for obj in in_pool:
        index = decode_index(str(_meta(obj).get("name", "")), driver_name, node_name)
        if index is None:
            deletes.append(_delete(obj, "name without slice index"))
        elif index >= count:
            deletes.append(_delete(obj, "index beyond the desired slice count"))
        else:
            candidates.setdefault(index, []).append(obj)

    def matches(index: int, obj: Mapping[str, Any], generation: int) -> bool:
        want = with_pool(expected[index], generation, count)
        stored = obj.get("spec") or {}
        return same_spec(adopt_server_fields(want, stored), stored) and _has_owner(obj, node_name, node_uid)

    selected: dict[int, Mapping[str, Any]] = {}
    for index, group in candidates.items():
        # Prefer the newest generation, then the one already right. A slice left at an older
        # generation (a sync interrupted half-way through a bump) is invisible to consumers
        # until rewritten, so one update brings it back: cheaper than delete + create + bump.
        newest = max(generation_of(o) for o in group)
        current = [o for o in group if generation_of(o) == newest]
        keep = next((o for o in current if matches(index, o, stored_generation)), current[0])
        selected[index] = keep
        for o in group:
            if o is not keep:
                older = generation_of(o) < newest
                deletes.append(_delete(o, "older pool generation" if older else "duplicate slice index"))

    changed = [i for i, obj in selected.items() if not matches(i, obj, stored_generation)]
    new = [i for i in range(count) if i not in selected]
    if new or len(changed) > 1:
        generation = stored_generation + 1
        rewrite = sorted(selected)
    else:
        generation = stored_generation
        rewrite = changed
    updates = tuple(
        _update(selected[i], with_pool(desired[i], generation, count), node_name, node_uid) for i in rewrite
    )
    creates = tuple(slice_object(desired[i], i, count, generation, node_uid) for i in new)
    unchanged = tuple(
        str(_meta(obj).get("name")) for i, obj in sorted(selected.items()) if i not in set(rewrite)
    )
    return SyncPlan(generation, count, tuple(deletes), updates, creates, unchanged)


def _delete(obj: Mapping[str, Any], reason: str) -> Delete:
    meta = _meta(obj)
    uid, version = str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))
    return Delete(str(meta.get("name")), uid, version, reason)


def _update(obj: Mapping[str, Any], spec: Mapping[str, Any], node_name: str, node_uid: str) -> dict[str, Any]:
    """The stored object with our spec: other metadata (labels, annotations) stays as it is."""
    out = copy.deepcopy(dict(obj))
    out["spec"] = adopt_server_fields(spec, obj.get("spec") or {})
    meta = out.setdefault("metadata", {})
    meta.pop("managedFields", None)
    if not _has_owner(out, node_name, node_uid):
        refs = [r for r in meta.get("ownerReferences") or [] if not r.get("controller")]
        meta["ownerReferences"] = [*refs, owner_reference(node_name, node_uid)]
    return out


# features whose absence from a stored slice can only mean a server without the gate (infer_dropped)
INFERRED_AT_START = frozenset({CONSUMABLE})


def infer_dropped(
    desired_specs: Sequence[Mapping[str, Any]],
    existing: Iterable[Mapping[str, Any]],
    *,
    driver_name: str,
    node_name: str,
) -> set[str]:
    """Features a previous instance of ours found off, read from the slices it left.

    A stored slice that equals the desired one except for exactly the fields of some features
    was written by us to a server that dropped them: expecting that avoids one probing write per
    slice at every restart. Used only when adopting at start-up; later differences are repaired.
    Only for fields a driver sends the same way every time it runs (consumable capacity): taints
    come and go with device health, and list attributes and node-allocatable mappings with the
    operator's flags, so a stored slice without them is as likely an older state or an older
    configuration as a server without the gate; those are probed by a write.
    """
    features: set[str] = set()
    count = len(desired_specs)
    for obj in existing:
        spec = obj.get("spec") or {}
        index = decode_index(str(_meta(obj).get("name", "")), driver_name, node_name)
        if spec.get("driver") != driver_name or index is None or index >= count:
            continue
        want = with_pool(desired_specs[index], generation_of(obj), count)
        dropped = dropped_features(want, spec)
        if dropped and same_spec(adopt_server_fields(strip_features(want, dropped), spec), spec):
            features |= dropped
    return features & INFERRED_AT_START
