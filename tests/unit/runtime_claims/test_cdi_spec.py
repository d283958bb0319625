"""CDI spec documents: minimum cdiVersion per field and name rules (docs/design/cdi.md), the file writer."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from topodra.common.cdi.edits import ContainerEdits, DeviceNode, Hook, Mount, NetDevice
from topodra.common.cdi.spec import (
    CdiWriter,
    SpecDevice,
    SpecError,
    build_spec,
    edits_from_cdi,
    edits_to_cdi,
    validate_device_name,
)

KIND = "test.topodra.io/claim"
ENV = ContainerEdits(env=("A=1",))


def version(
    edits: ContainerEdits, name: str = "dev", kind: str = KIND, spec_edits: ContainerEdits = ENV
) -> str:
    v: str = build_spec(kind, [SpecDevice(name, edits)], spec_edits)["cdiVersion"]
    return v


@pytest.mark.parametrize(
    ("edits", "expected"),
    [
        (ENV, "0.3.0"),
        (ContainerEdits(device_nodes=(DeviceNode("/dev/x", major=1, minor=3, type="c"),)), "0.3.0"),
        (ContainerEdits(mounts=(Mount("/a", "/b", ("ro",)),)), "0.3.0"),
        (ContainerEdits(mounts=(Mount("/a", "/b", type="bind"),)), "0.4.0"),
        (ContainerEdits(device_nodes=(DeviceNode("/dev/x", host_path="/dev/null"),)), "0.5.0"),
        (ContainerEdits(hooks=(Hook("createRuntime", "/bin/true"),)), "0.3.0"),
        (ContainerEdits(additional_gids=(44,)), "0.7.0"),
        (ContainerEdits(net_devices=(NetDevice("eth1", "net0"),)), "1.1.0"),
        (
            ContainerEdits(
                net_devices=(NetDevice("eth1", "net0"),),
                device_nodes=(DeviceNode("/dev/x", host_path="/dev/y"),),
            ),
            "1.1.0",
        ),
    ],
)
def test_minimum_version_follows_the_fields_used(edits: ContainerEdits, expected: str) -> None:
    assert version(edits) == expected


def test_version_from_names_kind_and_claim_wide_edits() -> None:
    assert version(ENV, name="0abc-dev") == "0.5.0"  # device name starting with a digit
    assert version(ENV, kind="test.topodra.io/claim.v2") == "0.6.0"  # dot in the class
    spec_edits = ContainerEdits(mounts=(Mount("/a", "/b", type="bind"),))
    assert version(ENV, spec_edits=spec_edits) == "0.4.0"


@pytest.mark.parametrize("name", ["", "-a", "a-", "a/b", "a b", "../x", "a=b"])
def test_bad_device_names_are_rejected(name: str) -> None:
    with pytest.raises(SpecError):
        validate_device_name(name)


@pytest.mark.parametrize("name", ["a", "0", "a.b:c_d-e", "0f0f0f0f-0000-4000-8000-000000000000-dev-0"])
def test_good_device_names(name: str) -> None:
    validate_device_name(name)


@pytest.mark.parametrize(
    ("kind", "devices", "message"),
    [
        ("novendor", [SpecDevice("d", ENV)], "vendor/class"),
        ("1vendor/c", [SpecDevice("d", ENV)], "vendor"),
        ("v.io/c-", [SpecDevice("d", ENV)], "class"),
        (KIND, [], "at least one device"),
        (KIND, [SpecDevice("d", ENV), SpecDevice("d", ENV)], "appears twice"),
        (KIND, [SpecDevice("d", ContainerEdits())], "has no edits"),
        (KIND, [SpecDevice("d", ContainerEdits(env=("NOEQUALS",)))], "KEY=VALUE"),
        (KIND, [SpecDevice("d", ContainerEdits(hooks=(Hook("onStart", "/x"),)))], "unknown hook name"),
        (KIND, [SpecDevice("d", ContainerEdits(hooks=(Hook("poststop", "rel"),)))], "not absolute"),
        (
            KIND,
            [SpecDevice("d", ContainerEdits(device_nodes=(DeviceNode("/dev/x", permissions="rwx"),)))],
            "invalid permissions",
        ),
        (KIND, [SpecDevice("d", ContainerEdits(mounts=(Mount("a", "/b"),)))], "absolute paths"),
    ],
)
def test_invalid_specs_are_refused_before_writing(kind: str, devices: list[SpecDevice], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        build_spec(kind, devices, ContainerEdits())


_text = st.text(alphabet="abcXYZ019/_-.", min_size=1, max_size=8).map(lambda s: "/" + s)
_edits = st.builds(
    ContainerEdits,
    env=st.lists(st.from_regex(r"[A-Z]{1,4}=[a-z0-9 ]{0,5}", fullmatch=True), max_size=3).map(tuple),
    device_nodes=st.lists(
        st.builds(
            DeviceNode,
            path=_text,
            host_path=st.none() | _text,
            type=st.none() | st.sampled_from(["c", "b"]),
            major=st.none() | st.integers(0, 255),
            minor=st.none() | st.integers(0, 255),
            file_mode=st.none() | st.integers(0, 0o777),
            permissions=st.none() | st.sampled_from(["r", "rw", "rwm"]),
            uid=st.none() | st.integers(0, 1000),
            gid=st.none() | st.integers(0, 1000),
        ),
        max_size=2,
    ).map(tuple),
    mounts=st.lists(
        st.builds(
            Mount, _text, _text, st.lists(st.sampled_from(["ro", "bind"]), max_size=2).map(tuple), st.none()
        )
    ).map(tuple),
    hooks=st.lists(
        st.builds(
            Hook, st.sampled_from(["createRuntime", "poststop"]), _text, st.just(()), st.just(()), st.none()
        ),
        max_size=1,
    ).map(tuple),
    net_devices=st.lists(st.builds(NetDevice, st.just("eth1"), st.just("net1")), max_size=1).map(tuple),
    additional_gids=st.lists(st.integers(1, 65535), max_size=2).map(tuple),
)


@given(_edits)
def test_edits_round_trip_through_cdi_json(edits: ContainerEdits) -> None:
    assert edits_from_cdi(json.loads(json.dumps(edits_to_cdi(edits)))) == edits


def test_writer_writes_lists_and_removes_only_its_own_files(tmp_path: Path) -> None:
    root = tmp_path / "cdi"
    w = CdiWriter(root, KIND)
    spec = build_spec(KIND, [SpecDevice("d", ENV)], ContainerEdits())
    path = w.write("0f0f0f0f-0000-4000-8000-000000000000", spec)
    assert path.name == "test.topodra.io-claim_0f0f0f0f-0000-4000-8000-000000000000.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == spec
    (root / "other.io-claim_x.json").write_text("{}")
    (root / "test.topodra.io-claim_y.yaml").write_text("{}")
    assert w.list_ids() == ["0f0f0f0f-0000-4000-8000-000000000000"]
    assert w.remove("0f0f0f0f-0000-4000-8000-000000000000") is True
    assert w.remove("0f0f0f0f-0000-4000-8000-000000000000") is False
    assert sorted(p.name for p in root.iterdir()) == ["other.io-claim_x.json", "test.topodra.io-claim_y.yaml"]


@pytest.mark.parametrize("spec_id", ["../evil", "a/b", "..", ""])
def test_writer_refuses_ids_that_are_not_one_path_component(tmp_path: Path, spec_id: str) -> None:
    w = CdiWriter(tmp_path, KIND)
    with pytest.raises(SpecError):
        w.write(spec_id, build_spec(KIND, [SpecDevice("d", ENV)], ContainerEdits()))
    assert list(tmp_path.iterdir()) == []


def test_writer_refuses_a_spec_of_another_kind(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not this writer's"):
        CdiWriter(tmp_path, KIND).write(
            "x", build_spec("other.io/c", [SpecDevice("d", ENV)], ContainerEdits())
        )
