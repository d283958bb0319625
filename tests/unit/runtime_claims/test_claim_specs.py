"""The claim core's two specs per claim (claims/spec.py `ClaimSpecs`) are exactly what the general
CDI builder (`build_spec`) makes of the same devices and edits, written as `json.dumps` would
write them; the checkpoint encodes the claim's record from the texts kept of it as it would
without them; and the claim core's record copies keep every field.

`ClaimSpecs` makes once per driver what `build_spec` redid per spec (kind checks, variable names,
markers) and checks per claim only what may be wrong (the driver's edits, the device names): these
tests hold it to the general builder on generated edits, uids, share ids and kinds, so that the
shortcut can never write another spec, another cdiVersion or let a bad edit through.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from topodra.common.cdi.edits import ContainerEdits, Hook, Mount
from topodra.common.cdi.spec import CdiWriter, SpecDevice, SpecError, build_spec
from topodra.common.runtime.checkpoint import ClaimRecord, Phase, _member, allocated_to_json, record_to_json
from topodra.common.runtime.claims import spec
from topodra.common.runtime.claims.manager import with_phase
from topodra.common.runtime.driver import AllocatedDevice, ClaimRef, Preparation, PreparedDevice

from tests.unit.runtime_claims.test_cdi_spec import _edits  # the CDI edits a driver may return

DRIVER = "test.topodra.io"

_uid = st.uuids(version=4).map(str)  # about one in three starts with a letter: cdiVersion 0.3.0 possible
_allocated = st.builds(
    AllocatedDevice,
    request=st.sampled_from(["gpu", "gpu/big", "nic"]),
    pool=st.sampled_from(["node-a", "node-b"]),
    device=st.sampled_from(["dev-0", "dev-1", "eno2"]),
    share_id=st.none() | _uid,
    consumed_capacity=st.dictionaries(st.sampled_from(["memory", "cores"]), st.sampled_from(["1", "2Gi"])),
    admin_access=st.booleans(),
)
_state = st.dictionaries(
    st.text(max_size=4), st.none() | st.integers() | st.text(max_size=4) | st.lists(st.integers(), max_size=3)
)


def _marker(claim: ClaimRef, device: str) -> str:
    return f"TOPODRA_{spec.driver_token(DRIVER)}_DEVICE_{spec.env_token(device)}={claim.uid}"


def _record(phase: Phase, claim: ClaimRef, allocated: list[AllocatedDevice], state: object) -> str:
    doc = {
        "phase": phase.value,
        "namespace": claim.namespace,
        "name": claim.name,
        "uid": claim.uid,
        "allocated": [allocated_to_json(a) for a in allocated],
        "state": state,
    }
    return f"{spec.record_variable(DRIVER)}={json.dumps(doc, sort_keys=True, separators=(',', ':'))}"


def general_provisional(kind: str, claim: ClaimRef, allocated: list[AllocatedDevice]) -> dict[str, object]:
    devices: dict[str, SpecDevice] = {}
    for a in allocated:
        name = spec.device_name(claim, a)
        devices.setdefault(name, SpecDevice(name, ContainerEdits(env=(_marker(claim, a.device),))))
    edits = ContainerEdits(env=(_record(Phase.STARTED, claim, allocated, {}),))
    return build_spec(kind, list(devices.values()), edits)


def general_final(
    kind: str, claim: ClaimRef, allocated: list[AllocatedDevice], prep: Preparation
) -> dict[str, object]:
    by_key = {(d.request, d.pool, d.device, d.share_id): d for d in prep.devices}
    by_dev = {(d.pool, d.device, d.share_id): d for d in prep.devices}
    devices: dict[str, SpecDevice] = {}
    for a in allocated:
        name = spec.device_name(claim, a)
        if name in devices:
            continue
        prepared = by_key.get((a.request, a.pool, a.device, a.share_id)) or by_dev.get(
            (a.pool, a.device, a.share_id)
        )
        edits = prepared.edits if prepared is not None else ContainerEdits()
        devices[name] = SpecDevice(
            name, dataclasses.replace(edits, env=(*edits.env, _marker(claim, a.device)))
        )
    record = _record(Phase.COMPLETED, claim, allocated, prep.state)
    claim_edits = dataclasses.replace(prep.claim_edits, env=(*prep.claim_edits.env, record))
    return build_spec(kind, list(devices.values()), claim_edits)


SPECS = {kind: spec.ClaimSpecs(kind, DRIVER) for kind in (f"{DRIVER}/claim", f"{DRIVER}/claim.v2")}


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from([f"{DRIVER}/claim", f"{DRIVER}/claim.v2"]),
    uid=_uid,
    allocated=st.lists(_allocated, min_size=1, max_size=4),
    edits=st.lists(_edits, min_size=4, max_size=4),
    claim_edits=_edits,
    state=_state,
)
def test_both_specs_are_what_the_general_builder_makes(
    kind: str,
    uid: str,
    allocated: list[AllocatedDevice],
    edits: list[ContainerEdits],
    claim_edits: ContainerEdits,
    state: dict[str, object],
) -> None:
    claim = ClaimRef("ns-1", "claim.one", uid)
    specs = SPECS[kind]  # one per kind for every example, as a manager keeps one: claim after claim
    held = tuple(allocated)  # the claim core asks for both specs with this very tuple
    provisional = specs.provisional(claim, held)
    assert provisional == general_provisional(kind, claim, allocated)
    # the devices the driver answered for (one without edits is prepared with its marker only)
    answered = zip(allocated, edits[: len(allocated)], strict=True)
    prep = Preparation(
        tuple(PreparedDevice(a.request, a.pool, a.device, e, a.share_id) for a, e in answered)[1:],
        claim_edits,
        spec.copy_state(state),
    )
    final, results = specs.final(claim, held, prep)
    assert final == general_final(kind, claim, allocated, prep)
    assert results == spec.results(kind, claim, allocated)
    # and written as json.dumps writes canonical JSON, the text put answers
    written = spec_bytes(kind, claim.uid, final)
    assert canonical(final) == written
    # the checkpoint's record of it, seeded as the claim core seeds it (the spec's text, the
    # devices' text of the specs' record), is encoded as if nothing had been kept, in both phases
    devices_json = specs.allocated_json(held)
    assert devices_json == canonical([allocated_to_json(a) for a in allocated])
    file_name = CdiWriter(Path("/nonexistent"), kind).file_name(uid)
    seeded = {"cdiSpec": written, "allocated": devices_json}
    done = ClaimRecord(claim, Phase.COMPLETED, held, file_name, prep, results, final, seeded)
    for rec in (done, with_phase(done, Phase.STARTED), ClaimRecord(claim, Phase.STARTED, held, file_name)):
        assert _member(uid, rec) == f"{canonical(uid)}:{canonical(record_to_json(rec))}".encode()
    # what a restart reads back from each
    back = spec.record_from_spec(kind, DRIVER, uid, file_name, provisional)
    assert back is not None and back.phase is Phase.STARTED and back.allocated == tuple(allocated)
    back = spec.record_from_spec(kind, DRIVER, uid, file_name, json.loads(json.dumps(final)))
    assert back is not None and back.phase is Phase.COMPLETED and back.preparation is not None
    assert back.preparation.state == prep.state


def canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def spec_bytes(kind: str, spec_id: str, doc: dict[str, object]) -> str:
    """What CdiWriter.put writes for `doc`, less the closing newline (which is what it answers)."""
    with tempfile.TemporaryDirectory() as tmp:
        w = CdiWriter(Path(tmp), kind)
        answered = w.put(spec_id, doc)
        text = (Path(tmp) / w.file_name(spec_id)).read_text()
    assert text == answered + "\n"
    return answered


@pytest.mark.parametrize(
    ("device_edits", "claim_edits", "message"),
    [
        (ContainerEdits(env=("NOEQUALS",)), ContainerEdits(), r"CDI device '.*-dev-0': env entry 'NOEQUALS'"),
        (ContainerEdits(mounts=(Mount("rel", "/b"),)), ContainerEdits(), "needs absolute paths"),
        (ContainerEdits(hooks=(Hook("onStart", "/x"),)), ContainerEdits(), "unknown hook name"),
        (ContainerEdits(), ContainerEdits(env=("1BAD=x",)), "claim-wide CDI edits: env entry '1BAD=x'"),
        (ContainerEdits(), ContainerEdits(additional_gids=(-1,)), "not a uint32"),
    ],
)
def test_a_bad_edit_of_the_driver_is_refused_as_the_general_builder_refuses_it(
    device_edits: ContainerEdits, claim_edits: ContainerEdits, message: str
) -> None:
    claim = ClaimRef("ns", "c", str(uuid.uuid4()))
    allocated = [AllocatedDevice("gpu", "node-a", "dev-0")]
    prep = Preparation((PreparedDevice("gpu", "node-a", "dev-0", device_edits),), claim_edits)
    with pytest.raises(SpecError, match=message):
        general_final(f"{DRIVER}/claim", claim, allocated, prep)
    with pytest.raises(SpecError, match=message):
        spec.ClaimSpecs(f"{DRIVER}/claim", DRIVER).final(claim, allocated, prep)


@pytest.mark.parametrize("kind", ["novendor", "1vendor/c", "v.io/c-", "v.io/"])
def test_a_bad_kind_is_refused_once_when_made(kind: str) -> None:
    with pytest.raises(SpecError):
        spec.ClaimSpecs(kind, DRIVER)


def test_a_device_name_that_is_not_a_cdi_name_is_refused() -> None:
    """The claim's checks make this impossible (check.py); the spec still refuses it."""
    claim = ClaimRef("ns", "c", str(uuid.uuid4()))
    with pytest.raises(SpecError, match="device name"):
        spec.ClaimSpecs(f"{DRIVER}/claim", DRIVER).provisional(claim, [AllocatedDevice("r", "p", "a/../b")])


def test_state_that_is_not_json_data_is_refused() -> None:
    with pytest.raises(TypeError, match="JSON"):
        spec.copy_state({"x": object()})
    with pytest.raises(TypeError):
        spec.copy_state(None)  # type: ignore[arg-type]
    state = {"cpus": [1, 2]}
    copy = spec.copy_state(state)
    assert copy == state and copy["cpus"] is not state["cpus"]


def test_with_phase_keeps_every_other_field() -> None:
    """ClaimRecord may grow fields; `with_phase` must carry each (dataclasses.replace would)."""
    values = {f.name: object() for f in dataclasses.fields(ClaimRecord)}
    rec = ClaimRecord(**values)  # type: ignore[arg-type]
    moved = with_phase(rec, Phase.STARTED)
    for f in dataclasses.fields(ClaimRecord):
        expected = Phase.STARTED if f.name == "phase" else values[f.name]
        assert getattr(moved, f.name) is expected, f.name
