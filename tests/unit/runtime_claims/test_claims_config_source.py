"""The opaque-config reading helper, and the real ClaimSource (official client) over HTTP.

The HTTP server here stands in for kube-apiserver's ResourceClaim GET until the control-plane tier
exists: it answers the exact path the client requests, with the API's JSON and Status bodies.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from topodra.common.kubeapi.claims import KubeClaimSource
from topodra.common.kubeapi.errors import ApiError, NotFound
from topodra.common.runtime.config import ConfigError, Params, applies_to, read_typed
from topodra.common.runtime.driver import ClaimRef, OpaqueConfig, PrepareError

from tests.unit.runtime_claims.claimkit import Result, claim_object, new_uid


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


CLAIM = ClaimRef("ns", "c", "0f0f0f0f-0000-4000-8000-000000000000")


def params(data: Any) -> Params:
    return Params(CLAIM, data, "config FromClaim #0")


def test_params_read_typed_values_and_reject_leftovers() -> None:
    p = params({"name": "eth1", "count": 3, "on": True, "tags": ["a"], "inner": {"x": 1}})
    assert p.string("name", pattern=r"[a-z0-9]+") == "eth1"
    assert p.integer("count", minimum=1, maximum=8) == 3
    assert p.boolean("on") is True
    assert p.strings("tags") == ("a",)
    inner = p.object("inner")
    assert inner is not None and inner.integer("x") == 1
    inner.finish()
    assert p.string("absent", "default") == "default"
    p.finish()


@pytest.mark.parametrize(
    ("data", "read", "message"),
    [
        ([], lambda p: None, "field 'parameters': must be a JSON object, got a list"),
        ({"n": True}, lambda p: p.integer("n"), "field 'n': must be an integer, got a boolean"),
        ({"n": 9}, lambda p: p.integer("n", maximum=8), "field 'n': must be <= 8, got 9"),
        ({}, lambda p: p.string("n", required=True), "field 'n': is required"),
        ({"n": "x"}, lambda p: p.string("n", choices=["a", "b"]), "must be one of 'a', 'b', got 'x'"),
        (
            {"o": {"x": "1"}},
            lambda p: p.object("o").integer("x"),
            "field 'o.x': must be an integer, got a string",
        ),
        ({"l": ["a", 2]}, lambda p: p.strings("l"), "field 'l[1]': must be a string, got a number"),
        ({"a": 1, "b": 2}, lambda p: p.finish(), "field 'a': unknown field (also: b)"),
    ],
)
def test_params_errors_name_claim_config_and_field(data: Any, read: Any, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        read(params(data))
    assert str(e.value).startswith("claim ns/c: config FromClaim #0, ")
    assert message in str(e.value)
    assert isinstance(e.value, PrepareError)  # a per-claim error for the kubelet


def test_read_typed_checks_api_version_and_kind() -> None:
    cfg = OpaqueConfig(
        "FromClass", (), {"apiVersion": "cpu.topodra.io/v1alpha1", "kind": "CpuConfig", "x": 1}
    )
    p = read_typed(CLAIM, cfg, 2, ["cpu.topodra.io/v1alpha1"], "CpuConfig")
    assert p.integer("x") == 1
    p.finish()
    with pytest.raises(ConfigError, match=r"config FromClass #2, field 'kind': must be 'NicConfig'"):
        read_typed(CLAIM, cfg, 2, ["cpu.topodra.io/v1alpha1"], "NicConfig")


def test_applies_to_main_and_subrequests() -> None:
    cfg = OpaqueConfig("FromClaim", ("gpu",), {})
    assert applies_to(cfg, "gpu") and applies_to(cfg, "gpu/big") and not applies_to(cfg, "nic")
    assert applies_to(OpaqueConfig("FromClaim", (), {}), "anything")
    assert not applies_to(OpaqueConfig("FromClaim", ("gpu/small",), {}), "gpu/big")


class FakeApiServer:
    """Serves `GET /apis/resource.k8s.io/v1/namespaces/<ns>/resourceclaims/<name>`."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.status_override: int | None = None
        self.paths: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.paths.append(self.path)
                parts = self.path.split("?")[0].strip("/").split("/")
                code, body = 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404}
                if outer.status_override:
                    code, body = outer.status_override, {"kind": "Status", "code": outer.status_override}
                elif (
                    parts[:3] == ["apis", "resource.k8s.io", "v1"]
                    and len(parts) == 7
                    and parts[5] == "resourceclaims"
                ):
                    obj = outer.claims.get((parts[4], parts[6]))
                    if obj is not None:
                        code, body = 200, obj
                    else:  # what kube-apiserver answers for a claim that does not exist
                        body["reason"] = "NotFound"
                        body["details"] = {
                            "name": parts[6],
                            "group": "resource.k8s.io",
                            "kind": "resourceclaims",
                        }
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def source(self, url: str | None = None) -> KubeClaimSource:
        cfg = client.Configuration()
        cfg.host = url or self.url
        cfg.retries = 0
        return KubeClaimSource(client.ApiClient(cfg), timeout=2)


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    s = FakeApiServer()
    yield s
    s.server.shutdown()


def test_kube_source_gets_the_claim_as_a_dict(api: FakeApiServer) -> None:
    obj = claim_object("ns1", "c1", new_uid(), [Result("r", "dev-0")])
    api.claims[("ns1", "c1")] = obj
    assert api.source().get("ns1", "c1") == obj
    assert api.paths == ["/apis/resource.k8s.io/v1/namespaces/ns1/resourceclaims/c1"]


def test_kube_source_maps_errors(api: FakeApiServer) -> None:
    with pytest.raises(NotFound, match="ns1/none"):
        api.source().get("ns1", "none")
    api.status_override = 503
    with pytest.raises(ApiError, match="ns1/none: 503"):
        api.source().get("ns1", "none")
    api.status_override = 403
    with pytest.raises(ApiError, match="ns1/none: 403"):
        api.source().get("ns1", "none")
    with pytest.raises(ApiError, match="ns1/x"):
        api.source(f"http://127.0.0.1:{free_port()}").get("ns1", "x")


def test_prepare_through_the_official_client(api: FakeApiServer, dirs: dict[str, Path]) -> None:
    from topodra.common.cdi.spec import CdiWriter
    from topodra.common.runtime.checkpoint import Checkpoint
    from topodra.common.runtime.claims import ClaimManager, cdi_kind

    from tests.unit.runtime_claims.claimkit import DRIVER, NODE, HoldDriver

    obj = claim_object("ns1", "c1", new_uid(), [Result("r", "dev-0")])
    api.claims[("ns1", "c1")] = obj
    m = ClaimManager(
        HoldDriver(dirs["hw"]),
        NODE,
        api.source(),
        Checkpoint(dirs["state"], DRIVER),
        CdiWriter(dirs["cdi"], cdi_kind(DRIVER)),
    )
    m.start()
    ref = ClaimRef("ns1", "c1", obj["metadata"]["uid"])
    assert not m.prepare([ref])[ref.uid].error
    api.status_override = 500
    missing = ClaimRef("ns1", "c2", new_uid())
    assert "retry later" in m.prepare([missing])[missing.uid].error
    assert m.reconcile().unreachable
    assert set(m.prepared()) == {ref.uid}
