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

from topodra.common.cdi.spec import (
    SpecError,
    canonical_json,
    edits_from_cdi,
    edits_to_cdi,
    edits_version,
    kind_version,
    name_version,
    newest,
    split_kind,
    validate_device_name,
    validate_edits,
)
from topodra.common.runtime.checkpoint import (
    ClaimRecord,
    Phase,
    allocated_from_json,
    devices_json,
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


def copy_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """The driver's state as a restart reads it back (JSON data, its own copy): what the record
    keeps, and must never change once checkpointed (the checkpoint caches each record's encoding).
    Raises TypeError or ValueError for what is not JSON data."""
    raw = dict(state)
    copied: dict[str, Any] = json.loads(canonical_json(raw)) if raw else {}
    return copied


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


class ClaimSpecs:
    """The two specs of each claim of one driver: the **provisional** one, written before the
    driver acts (a valid spec naming the claim's devices, each with its marker, and the record in
    phase started), and the **final** one once the driver answered (its edits, the markers, the
    record in phase completed).

    What is the same for every claim of the driver (the kind's checks and the cdiVersion it
    needs, the variable names, each device's marker name) is made once here, not per spec. The
    documents are those `build_spec` makes of the same devices and edits (a test compares them);
    its checks are made here on what may be wrong: the driver's edits (a driver bug must fail
    prepare, not container start) and each device name. The names the claim core writes itself
    need no check per claim: the uid, device names and share ids they are made of passed the
    claim's checks (check.py) before anything is written, and the variable names are letters,
    digits and `_` by construction (`env_token`).
    """

    def __init__(self, kind: str, driver_name: str) -> None:
        split_kind(kind)
        self.kind = kind
        self.driver_name = driver_name
        self._record = f"{record_variable(driver_name)}="
        self._marker = f"TOPODRA_{driver_token(driver_name)}_DEVICE_"
        self._floor = kind_version(kind)
        self._markers: dict[str, str] = {}  # device name -> its marker variable name and "="
        # the allocated devices' JSON of the last claim: both specs of a claim carry the same
        self._allocated: tuple[Sequence[AllocatedDevice], str] | None = None

    def _marker_of(self, device: str) -> str:
        marker = self._markers.get(device)
        if marker is None:
            if len(self._markers) >= 4096:  # the devices claimed on this node; bounded anyway
                self._markers.clear()
            marker = self._markers[device] = f"{self._marker}{env_token(device)}="
        return marker

    def allocated_json(self, allocated: Sequence[AllocatedDevice]) -> str:
        """The canonical JSON of the devices, made once per claim: both specs and the checkpoint's
        record are asked for it with the very same tuple (a tuple of frozen values; a list
        could change between)."""
        last = self._allocated
        if last is not None and last[0] is allocated:
            return last[1]
        devices = devices_json(allocated)
        if type(allocated) is tuple:
            self._allocated = (allocated, devices)
        return devices

    def _record_env(
        self, phase: Phase, claim: ClaimRef, allocated: Sequence[AllocatedDevice], state: Mapping[str, Any]
    ) -> str:
        """`<record variable>=<canonical JSON of the record>`, the keys written in sorted order."""
        devices = self.allocated_json(allocated)
        return (
            f'{self._record}{{"allocated":{devices},'
            f'"name":{canonical_json(claim.name)},"namespace":{canonical_json(claim.namespace)},'
            f'"phase":{canonical_json(phase.value)},"state":{canonical_json(state) if state else "{}"},'
            f'"uid":{canonical_json(claim.uid)}}}'
        )

    def _document(
        self, devices: dict[str, dict[str, Any]], claim_edits: dict[str, Any], version: str
    ) -> dict[str, Any]:
        for name in devices:
            validate_device_name(name)
        if not devices:
            raise SpecError("a CDI spec needs at least one device")
        return {
            "cdiVersion": newest((version, *(name_version(name) for name in devices))),
            "kind": self.kind,
            "devices": [{"name": name, "containerEdits": edits} for name, edits in devices.items()],
            "containerEdits": claim_edits,
        }

    def provisional(self, claim: ClaimRef, allocated: Sequence[AllocatedDevice]) -> dict[str, Any]:
        """The spec written before the driver acts, whose CDI ids nobody knows yet (the kubelet
        learns them from the answer, after the final spec)."""
        devices: dict[str, dict[str, Any]] = {}
        for a in allocated:
            name = device_name(claim, a)
            if name not in devices:
                devices[name] = {"env": [f"{self._marker_of(a.device)}{claim.uid}"]}
        record = self._record_env(Phase.STARTED, claim, allocated, {})
        return self._document(devices, {"env": [record]}, self._floor)

    def final(
        self, claim: ClaimRef, allocated: Sequence[AllocatedDevice], prep: Preparation
    ) -> tuple[dict[str, Any], tuple[ResultDevice, ...]]:
        """The spec once the driver answered (`prep`, its state already a copy: `copy_state`),
        and the answer for the kubelet."""
        by_key = {(d.request, d.pool, d.device, d.share_id): d for d in prep.devices}
        by_dev = {(d.pool, d.device, d.share_id): d for d in prep.devices}
        wanted = {(a.pool, a.device, a.share_id) for a in allocated}
        for d in prep.devices:
            if (d.pool, d.device, d.share_id) not in wanted:
                raise PrepareError(
                    f"driver returned device {d.device!r} (pool {d.pool!r}) that is not allocated"
                )
        versions = [self._floor]
        devices: dict[str, dict[str, Any]] = {}
        for a in allocated:
            name = device_name(claim, a)
            if name in devices:
                continue
            prepared = by_key.get((a.request, a.pool, a.device, a.share_id)) or by_dev.get(
                (a.pool, a.device, a.share_id)
            )
            edits = edits_to_cdi(prepared.edits) if prepared is not None else {}
            if prepared is not None:
                validate_edits(prepared.edits, f"CDI device {name!r}")
                versions.append(edits_version(prepared.edits))
            edits["env"] = [*edits.get("env", ()), f"{self._marker_of(a.device)}{claim.uid}"]
            devices[name] = edits
        validate_edits(prep.claim_edits, "claim-wide CDI edits")
        versions.append(edits_version(prep.claim_edits))
        claim_edits = edits_to_cdi(prep.claim_edits)
        record = self._record_env(Phase.COMPLETED, claim, allocated, prep.state)
        claim_edits["env"] = [*claim_edits.get("env", ()), record]
        return self._document(devices, claim_edits, newest(versions)), results(self.kind, claim, allocated)


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
