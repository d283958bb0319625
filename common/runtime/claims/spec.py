"""A claim's CDI spec, which also carries the claim's record.

One spec file per claim (`<driver name>-claim_<uid>.json`, kind `<driver name>/claim`), one CDI
device per allocation result named `<uid>-<device>` (plus `-<shareID>` for a shared device);
claim-wide edits go into the spec-level `containerEdits`, which CDI applies whenever any device of
the spec is requested. Each CDI device carries `TOPODRA_<DRIVER>_DEVICE_<DEVICE>=<uid>`, so no
device is ever empty (CDI consumers reject devices without edits) and a workload sees what it got.

The spec-level edits also carry `TOPODRA_<DRIVER>_CLAIM_RECORD=<JSON>`: the phase, the claim's
namespace, name and uid, its allocated devices and the driver's state (the CPUs chosen, the NIC
attachment arguments). The claim core writes a provisional spec (devices with their markers
only, phase "started") before the driver acts and the final one once it answered, and removes
it only after the driver released the claim: while the machine runs, every claim whose devices
the driver may hold has a spec on disk that names them, so a damaged checkpoint is rebuilt from
the specs (`record_from_spec`) instead of starting empty. CDI 0.5.0, which the runtimes in use
read, has no other place for such data (annotations need 0.6.0, unknown fields fail the load);
nothing in it is news to the workload (its own claim, devices and their placement).
See docs/design/claim-lifecycle.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from topodra.common.cdi.edits import ContainerEdits
from topodra.common.cdi.spec import SpecDevice, build_spec, edits_from_cdi
from topodra.common.runtime.checkpoint import (
    ClaimRecord,
    Phase,
    allocated_from_json,
    allocated_to_json,
)
from topodra.common.runtime.driver import AllocatedDevice, ClaimRef, Preparation, PreparedDevice, PrepareError
from topodra.common.runtime.names import is_dns_label, is_uid, main_request
from topodra.common.runtime.seams import ResultDevice

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def env_token(value: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", value.upper())


def driver_token(driver_name: str) -> str:
    return env_token(driver_name.split(".", 1)[0])


def record_variable(driver_name: str) -> str:
    return f"TOPODRA_{driver_token(driver_name)}_CLAIM_RECORD"


def device_name(claim: ClaimRef, a: AllocatedDevice) -> str:
    return f"{claim.uid}-{a.device}" + (f"-{a.share_id}" if a.share_id else "")


def _marker(driver_name: str, claim: ClaimRef, device: str) -> str:
    return f"TOPODRA_{driver_token(driver_name)}_DEVICE_{env_token(device)}={claim.uid}"


def _record_env(
    driver_name: str,
    phase: Phase,
    claim: ClaimRef,
    allocated: Sequence[AllocatedDevice],
    state: Mapping[str, Any],
) -> str:
    doc = {
        "phase": phase.value,
        "namespace": claim.namespace,
        "name": claim.name,
        "uid": claim.uid,
        "allocated": [allocated_to_json(a) for a in allocated],
        "state": dict(state),
    }
    return f"{record_variable(driver_name)}={json.dumps(doc, sort_keys=True, separators=(',', ':'))}"


def results(kind: str, claim: ClaimRef, allocated: Sequence[AllocatedDevice]) -> tuple[ResultDevice, ...]:
    """What the kubelet is told for each allocated device (CDI ids into this claim's spec)."""
    return tuple(
        ResultDevice(
            request_names=(main_request(a.request),),
            pool=a.pool,
            device=a.device,
            cdi_device_ids=(f"{kind}={device_name(claim, a)}",),
            share_id=a.share_id,
        )
        for a in allocated
    )


def provisional(
    kind: str, driver_name: str, claim: ClaimRef, allocated: Sequence[AllocatedDevice]
) -> dict[str, Any]:
    """The spec written before the driver acts: a valid spec naming the claim's devices, whose
    CDI ids nobody knows yet (the kubelet learns them from the answer, after the final spec)."""
    devices: dict[str, SpecDevice] = {}
    for a in allocated:
        name = device_name(claim, a)
        devices.setdefault(
            name, SpecDevice(name, ContainerEdits(env=(_marker(driver_name, claim, a.device),)))
        )
    edits = ContainerEdits(env=(_record_env(driver_name, Phase.STARTED, claim, allocated, {}),))
    return build_spec(kind, list(devices.values()), edits)


def final(
    kind: str, driver_name: str, claim: ClaimRef, allocated: Sequence[AllocatedDevice], prep: Preparation
) -> tuple[dict[str, Any], tuple[ResultDevice, ...]]:
    """The spec once the driver answered, and the answer for the kubelet."""
    by_key = {(d.request, d.pool, d.device, d.share_id): d for d in prep.devices}
    by_dev = {(d.pool, d.device, d.share_id): d for d in prep.devices}
    wanted = {(a.pool, a.device, a.share_id) for a in allocated}
    for d in prep.devices:
        if (d.pool, d.device, d.share_id) not in wanted:
            raise PrepareError(f"driver returned device {d.device!r} (pool {d.pool!r}) that is not allocated")
    devices: dict[str, SpecDevice] = {}
    for a in allocated:
        name = device_name(claim, a)
        if name in devices:
            continue
        prepared = by_key.get((a.request, a.pool, a.device, a.share_id)) or by_dev.get(
            (a.pool, a.device, a.share_id)
        )
        edits = prepared.edits if prepared is not None else ContainerEdits()
        devices[name] = SpecDevice(
            name, replace(edits, env=(*edits.env, _marker(driver_name, claim, a.device)))
        )
    record = _record_env(driver_name, Phase.COMPLETED, claim, allocated, prep.state)
    claim_edits = replace(prep.claim_edits, env=(*prep.claim_edits.env, record))
    return build_spec(kind, list(devices.values()), claim_edits), results(kind, claim, allocated)


# --- reading a spec back ------------------------------------------------------------------------


def record_from_spec(kind: str, driver_name: str, uid: str, file_name: str, spec: Any) -> ClaimRecord | None:
    """The record a spec of ours carries, or None when it carries none that is usable."""
    if not isinstance(spec, Mapping) or spec.get("kind") != kind:
        return None
    prefix = record_variable(driver_name) + "="
    edits = spec.get("containerEdits") or {}
    env = edits.get("env") if isinstance(edits, Mapping) else None
    text = next((e[len(prefix) :] for e in env or () if isinstance(e, str) and e.startswith(prefix)), None)
    if text is None:
        return None
    try:
        doc = json.loads(text)
        claim = ClaimRef(str(doc["namespace"]), str(doc["name"]), str(doc["uid"]))
        phase = Phase(doc["phase"])
        allocated = tuple(allocated_from_json(a) for a in doc["allocated"])
        state = doc["state"]
        if claim.uid != uid or not isinstance(state, dict):
            return None
        if phase is Phase.STARTED:
            return ClaimRecord(claim, Phase.STARTED, allocated, file_name)
        by_name = {
            d.get("name"): d.get("containerEdits") or {}
            for d in spec.get("devices") or ()
            if isinstance(d, Mapping)
        }
        marker_prefix = f"TOPODRA_{driver_token(driver_name)}_DEVICE_"
        prepared = []
        for a in allocated:
            device_edits = edits_from_cdi(by_name.get(device_name(claim, a), {}))
            env_kept = tuple(e for e in device_edits.env if not e.startswith(marker_prefix))
            prepared.append(
                PreparedDevice(a.request, a.pool, a.device, replace(device_edits, env=env_kept), a.share_id)
            )
        claim_edits = edits_from_cdi(edits)
        claim_edits = replace(claim_edits, env=tuple(e for e in claim_edits.env if not e.startswith(prefix)))
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError):
        return None
    return ClaimRecord(
        claim=claim,
        phase=Phase.COMPLETED,
        allocated=allocated,
        cdi_file=file_name,
        preparation=Preparation(tuple(prepared), claim_edits, state),
        result=results(kind, claim, allocated),
        cdi_spec=dict(spec),
    )


def devices_named(uid: str, text: str, pools: Sequence[str]) -> tuple[AllocatedDevice, ...]:
    """The devices a damaged spec of claim `uid` still names (CDI device names `<uid>-<device>`
    and `<uid>-<device>-<shareID>` anywhere in its text), as held in each of `pools` (a spec
    does not name its pool): what fail-closed means for a spec that carries no usable record."""
    found: dict[tuple[str, str | None], None] = {}
    for m in re.finditer(rf'"{re.escape(uid)}-([a-z0-9][-a-z0-9]*)"', text):
        name = m.group(1)
        share = re.search(rf"-({_UUID})$", name)
        device, share_id = (name[: share.start()], share.group(1)) if share else (name, None)
        if is_dns_label(device) and (share_id is None or is_uid(share_id)):
            found[(device, share_id)] = None
    return tuple(
        AllocatedDevice("unknown", pool, device, share_id=share_id)
        for device, share_id in found
        for pool in pools
    )
