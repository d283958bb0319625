"""Every kind of bad claim gets its own clear error naming it; nothing is written, nothing lost."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from topodra.common.runtime import checkpoint
from topodra.common.runtime.driver import ClaimRef

from tests.unit.runtime_claims.claimkit import (
    DRIVER,
    HoldDriver,
    MemoryClaimStore,
    Result,
    claim_object,
    driver_config,
    new_uid,
)
from tests.unit.runtime_claims.conftest import ManagerFactory


def tree_digest(*roots: Path) -> str:
    """Names, modes and contents of every file below the roots: "nothing written" made checkable.
    The checkpoint counts by the claims of the document a start would read, not by its slot
    files: every operation that reaches the driver writes a slot with the next sequence number
    (the other slot is the outcome of the operation before, see docs/design/claim-lifecycle.md)."""
    h = hashlib.sha256()
    for root in roots:
        found = checkpoint.newest(root, DRIVER) if root.is_dir() else None
        if found is not None:
            h.update(json.dumps(found[1]["claims"], sort_keys=True).encode())
        for p in sorted(x for x in root.rglob("*") if ".checkpoint-" not in x.name) if root.exists() else ():
            h.update(str(p).encode())
            if p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()


Setup = Callable[[MemoryClaimStore], ClaimRef]


def _store(obj: dict[str, Any]) -> Setup:
    return lambda s: s.put(obj)


def _not_found(s: MemoryClaimStore) -> ClaimRef:
    return ClaimRef("ns1", "ghost", new_uid())


def _uid_mismatch(s: MemoryClaimStore) -> ClaimRef:
    ref = s.put(claim_object("ns1", "replaced", new_uid(), [Result("r", "dev-1")]))
    return ClaimRef(ref.namespace, ref.name, new_uid())


def _unreachable(s: MemoryClaimStore) -> ClaimRef:
    ref = s.put(claim_object("ns1", "later", new_uid(), [Result("r", "dev-1")]))
    s.down = True
    return ref


def _claim(name: str, results: list[Result] | None, config: list[dict[str, Any]] | None = None) -> Setup:
    return lambda s: s.put(claim_object("ns1", name, new_uid(), results, config or []))


def _raw_result(name: str, **result: Any) -> Setup:
    def setup(s: MemoryClaimStore) -> ClaimRef:
        obj = claim_object("ns1", name, new_uid(), [Result("r", "dev-1")])
        obj["status"]["allocation"]["devices"]["results"][0].update(result)
        return s.put(obj)

    return setup


def _raw_config(name: str, entry: Any) -> Setup:
    return _claim(name, [Result("r", "dev-1")], [entry])


CASES: dict[str, tuple[Setup, str]] = {
    "not found": (_not_found, "not found in the API server"),
    "uid mismatch": (_uid_mismatch, "got replaced"),
    "not allocated": (_claim("unalloc", None), "not allocated"),
    "no result of ours": (
        _claim("foreign", [Result("r", "x", driver="gpu.example.com")]),
        "no device of driver test.topodra.io",
    ),
    "other node's pool": (_claim("elsewhere", [Result("r", "dev-1", pool="node-b")]), "pool 'node-b'"),
    "unknown device": (
        _claim("nodev", [Result("r", "dev-99")]),
        "device 'dev-99' does not exist on node node-a",
    ),
    "held by another claim": (_claim("second", [Result("r", "dev-0")]), "already held by claim ns1/holder"),
    "api unreachable": (_unreachable, "cannot read it from the API server, retry later"),
    "parameters not an object": (
        _raw_config(
            "cfg1", {"source": "FromClaim", "opaque": {"driver": "test.topodra.io", "parameters": [1]}}
        ),
        "config[0]: opaque.parameters must be a JSON object",
    ),
    "bad config source": (
        _raw_config(
            "cfg2", {"source": "FromNowhere", "opaque": {"driver": "test.topodra.io", "parameters": {}}}
        ),
        "source 'FromNowhere'",
    ),
    "wrong config kind": (
        _raw_config(
            "cfg3",
            {
                **driver_config(),
                "opaque": {
                    "driver": "test.topodra.io",
                    "parameters": {"apiVersion": "test.topodra.io/v1alpha1", "kind": "GpuConfig"},
                },
            },
        ),
        "field 'kind': must be 'TestConfig', got 'GpuConfig'",
    ),
    "unknown config apiVersion": (
        _raw_config(
            "cfg4",
            {
                **driver_config(),
                "opaque": {
                    "driver": "test.topodra.io",
                    "parameters": {"apiVersion": "test.topodra.io/v9", "kind": "TestConfig"},
                },
            },
        ),
        "field 'apiVersion': must be one of test.topodra.io/v1alpha1, got 'test.topodra.io/v9'",
    ),
    "config field of the wrong type": (
        _raw_config("cfg5", driver_config(env="A=1")),
        "field 'env': must be a list of strings, got a string",
    ),
    "unknown config field": (_raw_config("cfg6", driver_config(envv=["A=1"])), "field 'envv': unknown field"),
    "config field value": (_raw_config("cfg7", driver_config(env=["lower=1"])), "field 'env[0]': must match"),
    "crafted device name": (_raw_result("trav1", device="../../etc/passwd"), "is not a DNS label; refusing"),
    "crafted share id": (_raw_result("trav2", shareID="../x"), "is not a lowercase RFC 4122 UUID; refusing"),
    "crafted request": (_raw_result("trav3", request="a/b/c"), "is not a request name"),
}


DRIVER_PARSED = {
    "wrong config kind",
    "unknown config apiVersion",
    "config field of the wrong type",
    "unknown config field",
    "config field value",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_claim_gets_a_clear_error_and_changes_nothing(
    case: str,
    make_manager: ManagerFactory,
    claim_store: MemoryClaimStore,
    driver: HoldDriver,
    dirs: dict[str, Path],
) -> None:
    setup, expected = CASES[case]
    holder = claim_store.put(claim_object("ns1", "holder", new_uid(), [Result("r", "dev-0")]))
    m = make_manager(driver)
    assert not m.prepare([holder])[holder.uid].error
    before = tree_digest(dirs["state"], dirs["cdi"], dirs["hw"])
    calls = len(driver.calls)

    bad = setup(claim_store)
    out = m.prepare([bad])[bad.uid]

    assert expected in out.error, out.error
    assert f"ns1/{bad.name}" in out.error
    assert out.devices == ()
    assert tree_digest(dirs["state"], dirs["cdi"], dirs["hw"]) == before
    called = [c[0] for c in driver.calls[calls:]]
    # the driver parses its own parameters; everything else is refused before the driver is called
    assert called == (["prepare", "unprepare"] if case in DRIVER_PARSED else [])
    assert set(m.prepared()) == {holder.uid}


def test_driver_is_not_called_for_claims_the_runtime_rejects(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, driver: HoldDriver
) -> None:
    m = make_manager(driver)
    refs = [CASES[c][0](claim_store) for c in ("not allocated", "other node's pool", "unknown device")]
    out = m.prepare(refs)
    assert all(o.error for o in out.values())
    assert [c for c in driver.calls if c[0] == "prepare"] == []


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (ClaimRef("ns1", "c", "../../../tmp/evil"), "not a lowercase RFC 4122 UUID"),
        (ClaimRef("ns1", "c", "ABCDEFAB-0000-0000-0000-000000000000"), "not a lowercase RFC 4122 UUID"),
        (ClaimRef("../ns", "c", "0f0f0f0f-0000-4000-8000-000000000000"), "namespace is not a DNS label"),
        (ClaimRef("ns1", "a/b", "0f0f0f0f-0000-4000-8000-000000000000"), "name is not a DNS subdomain"),
    ],
)
def test_crafted_claim_reference_is_refused_before_any_io(
    ref: ClaimRef,
    message: str,
    make_manager: ManagerFactory,
    claim_store: MemoryClaimStore,
    dirs: dict[str, Path],
) -> None:
    claim_store.put(claim_object(ref.namespace, ref.name, ref.uid, [Result("r", "dev-1")]))
    m = make_manager()
    gets = claim_store.gets
    before = tree_digest(dirs["state"], dirs["cdi"], dirs["hw"], dirs["state"].parent)
    out = m.prepare([ref])[ref.uid]
    assert message in out.error
    assert claim_store.gets == gets
    assert tree_digest(dirs["state"], dirs["cdi"], dirs["hw"], dirs["state"].parent) == before


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({f"k{i:05d}": 0 for i in range(10_000)}, "field 'k00000': unknown field (also: k00001, "),
        ({"env": ["x" * 100_000]}, "field 'env[0]': must match"),
    ],
)
def test_an_error_quoting_what_a_tenant_sent_stays_short(
    params: dict[str, Any],
    expected: str,
    make_manager: ManagerFactory,
    claim_store: MemoryClaimStore,
) -> None:
    """10,000 unknown keys made a 100 KB error (sent to the kubelet, put into events and logs on
    every retry); a long value quoted in an error did the same."""
    ref = claim_store.put(
        claim_object("ns1", "big", new_uid(), [Result("r", "dev-1")], [driver_config(**params)])
    )
    error = make_manager().prepare([ref])[ref.uid].error
    assert error.startswith("claim ns1/big: config FromClaim #0, ") and expected in error
    assert len(error) <= 1000
