"""The claim core against a real kube-apiserver (control-plane tier): claims are created and
allocated through the status subresource, and the manager GETs them with the official client."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes import client
from topodra.common.cdi.spec import CdiWriter
from topodra.common.kubeapi.claims import KubeClaimSource
from topodra.common.runtime.checkpoint import Checkpoint
from topodra.common.runtime.claims import ClaimManager, cdi_kind
from topodra.common.runtime.driver import ClaimRef

from tests.unit.runtime_claims.claimkit import (
    DRIVER,
    NODE,
    HoldDriver,
    KubeClaimStore,
    Result,
    claim_object,
    driver_config,
    new_uid,
)

pytestmark = pytest.mark.controlplane


@pytest.fixture(scope="module")
def kube(request: pytest.FixtureRequest) -> Iterator[tuple[Any, str]]:
    """(admin ApiClient, a namespace of this module's own)."""
    try:
        cp = request.getfixturevalue("control_plane")
    except (
        pytest.FixtureLookupError
    ):  # the tier is not in this checkout (its own skip/fail rules apply once it is)
        pytest.skip("the control_plane fixture (tests/controlplane) is not available")
    api = cp.api_client()
    ns = f"claims-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    yield api, ns
    client.CoreV1Api(api).delete_namespace(ns)


@pytest.fixture
def store(kube: tuple[Any, str]) -> KubeClaimStore:
    return KubeClaimStore(kube[0])


@pytest.fixture
def manager(store: KubeClaimStore, tmp_path: Path) -> Iterator[ClaimManager]:
    m = ClaimManager(
        HoldDriver(tmp_path / "hw"),
        NODE,
        store.source,
        Checkpoint(tmp_path / "state", DRIVER),
        CdiWriter(tmp_path / "cdi", cdi_kind(DRIVER)),
    )
    m.start()
    yield m
    m.close()


def name() -> str:
    return f"c-{uuid.uuid4().hex[:8]}"


def test_prepare_a_claim_allocated_in_the_api_server(
    kube: tuple[Any, str], store: KubeClaimStore, manager: ClaimManager, tmp_path: Path
) -> None:
    ns = kube[1]
    share = new_uid()
    ref = store.put(
        claim_object(
            ns,
            name(),
            "ignored",
            [Result("gpu/big", "dev-0"), Result("s", "shared-0", share_id=share)],
            [
                driver_config("FromClass", env=["FROM_CLASS=1"]),
                driver_config(requests=["gpu"], env=["ONLY_GPU=1"]),
            ],
        )
    )
    out = manager.prepare([ref])[ref.uid]
    assert not out.error, out.error
    assert [(d.request_names, d.device, d.share_id) for d in out.devices] == [
        (("gpu",), "dev-0", None),
        (("s",), "shared-0", share),
    ]
    spec = json.loads((tmp_path / "cdi" / f"{DRIVER}-claim_{ref.uid}.json").read_text())
    env = spec["devices"][0]["containerEdits"]["env"]
    assert "FROM_CLASS=1" in env and "ONLY_GPU=1" in env
    assert manager.unprepare([ref]) == {ref.uid: ""}


def test_bad_claims_from_the_api_server(
    kube: tuple[Any, str], store: KubeClaimStore, manager: ClaimManager
) -> None:
    ns = kube[1]
    holder = store.put(claim_object(ns, name(), "x", [Result("r", "dev-1")]))
    assert not manager.prepare([holder])[holder.uid].error

    replaced_name = name()
    old = store.put(claim_object(ns, replaced_name, "x", [Result("r", "dev-2")]))
    store.delete(ns, replaced_name)
    store.put(claim_object(ns, replaced_name, "x", [Result("r", "dev-2")]))

    cases = {
        "not found in the API server": ClaimRef(ns, name(), new_uid()),
        "got replaced": old,
        "not allocated": store.put(claim_object(ns, name(), "x", None)),
        "pool 'node-b'": store.put(claim_object(ns, name(), "x", [Result("r", "dev-3", pool="node-b")])),
        "does not exist on node": store.put(claim_object(ns, name(), "x", [Result("r", "dev-99")])),
        "already held by claim": store.put(claim_object(ns, name(), "x", [Result("r", "dev-1")])),
        "field 'kind': must be 'TestConfig'": store.put(
            claim_object(
                ns,
                name(),
                "x",
                [Result("r", "dev-4")],
                [
                    {
                        **driver_config(),
                        "opaque": {
                            "driver": DRIVER,
                            "parameters": {"apiVersion": "test.topodra.io/v1alpha1", "kind": "K"},
                        },
                    }
                ],
            )
        ),
    }
    out = manager.prepare(list(cases.values()))
    for expected, ref in cases.items():
        assert expected in out[ref.uid].error, out[ref.uid].error
        assert f"{ns}/{ref.name}" in out[ref.uid].error
    assert set(manager.prepared()) == {holder.uid}


def test_unreachable_api_server_is_a_retryable_per_claim_error(
    kube: tuple[Any, str], store: KubeClaimStore, tmp_path: Path
) -> None:
    ref = store.put(claim_object(kube[1], name(), "x", [Result("r", "dev-0")]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = client.Configuration(host=f"https://127.0.0.1:{port}")
    cfg.retries = 0
    source = KubeClaimSource(client.ApiClient(cfg), timeout=2)
    m = ClaimManager(
        HoldDriver(tmp_path / "hw"),
        NODE,
        source,
        Checkpoint(tmp_path / "state", DRIVER),
        CdiWriter(tmp_path / "cdi", cdi_kind(DRIVER)),
    )
    m.start()
    err = m.prepare([ref])[ref.uid].error
    assert "cannot read it from the API server, retry later" in err and ref.name in err
    assert m.prepared() == {} and not (tmp_path / "cdi").exists()


def test_reconcile_with_the_api_server(
    kube: tuple[Any, str], store: KubeClaimStore, manager: ClaimManager
) -> None:
    ns = kube[1]
    gone, dealloc, kept = (
        store.put(claim_object(ns, name(), "x", [Result("r", f"dev-{i}")])) for i in (5, 6, 7)
    )
    assert all(not o.error for o in manager.prepare([gone, dealloc, kept]).values())
    store.delete(ns, gone.name)
    store.deallocate(ns, dealloc.name)
    report = manager.reconcile()
    assert report.unprepared == [dealloc.uid]
    assert report.suspected == [gone.uid]
    report = manager.reconcile()
    assert report.unprepared == [gone.uid]
    assert set(manager.prepared()) == {kept.uid}


def raw_call(api: Any, method: str, path: str, body: bytes) -> Any:
    """One call with a body sent byte for byte: the official client would re-encode it with
    json.dumps, which refuses the nesting this test needs."""
    cfg = api.configuration
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    url = urlsplit(cfg.host)
    conn = http.client.HTTPSConnection(url.hostname, url.port, context=ctx, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
    finally:
        conn.close()
    assert 200 <= resp.status < 300, data[:500]
    return data


def test_a_config_nested_deeper_than_json_loads_follows_fails_only_its_claim(
    kube: tuple[Any, str], store: KubeClaimStore, manager: ClaimManager
) -> None:
    """The API server takes opaque parameters nested 4,000 deep (10 KiB); Python's json.loads
    stops near 1,000 with RecursionError. That is the bad claim's error, not the kubelet call's."""
    api, ns = kube
    good = store.put(claim_object(ns, name(), "x", [Result("r", "dev-0")]))
    deep_name = name()
    spec = claim_object(ns, deep_name, "x", [Result("r", "dev-1")], [driver_config(x="@DEEP@")])
    path = f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"
    body = {"apiVersion": spec["apiVersion"], "kind": spec["kind"], "metadata": {"name": deep_name}}
    created = json.loads(raw_call(api, "POST", path, json.dumps(body | {"spec": spec["spec"]}).encode()))
    created["status"] = spec["status"]
    deep = "[" * 4000 + "]" * 4000
    text = json.dumps(created).replace('"@DEEP@"', deep)
    raw_call(api, "PUT", f"{path}/{deep_name}/status", text.encode())
    bad = ClaimRef(ns, deep_name, created["metadata"]["uid"])

    out = manager.prepare([good, bad])
    assert not out[good.uid].error
    assert f"{ns}/{deep_name}" in out[bad.uid].error and "nested too deeply" in out[bad.uid].error
    assert set(manager.prepared()) == {good.uid}
