"""topodra.common.kubeapi.keepalive: the claim GET over kept-alive connections (malformed answers:
test_keepalive_hostile.py).

Transport behaviour (keep-alive, a connection the server closed, headers, errors) is checked
against a small HTTP/1.1 server on loopback that records what it is sent; TLS, client
certificates and tokens against the real kube-apiserver (control-plane tier), where the answer
must equal the official client's for the same object.
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client
from topodra.common.kubeapi import keepalive, rest
from topodra.common.kubeapi.claims import KubeClaimSource, claim_path
from topodra.common.kubeapi.errors import ApiError, NotFound

from tests.kit.claims import claim_body


class Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests: list[dict[str, Any]] = []  # path, headers, client port
        self.close_after_each = False  # like a server whose keep-alive timeout is very short
        self.refuse = ""  # an Authorization value answered with 401

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Recorder

    def do_GET(self) -> None:
        self.server.requests.append(  # header names as sent, compared lower-case (they are case-insensitive)
            {
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "port": self.client_address[1],
            }
        )
        status = 404 if self.path.endswith("/missing") else 200
        if self.server.refuse and self.headers.get("Authorization") == self.server.refuse:
            status = 401
        body = json.dumps({"path": self.path, "status": status}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if self.server.close_after_each:
            # closes without saying so (no "Connection: close"): the client finds out on reuse
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Recorder]:
    srv = Recorder()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def configuration(host: str, token: str | None = None) -> Any:
    cfg = client.Configuration(host=host)
    if token:
        cfg.api_key = {"BearerToken": token}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
    return cfg


def test_answers_reuse_one_connection_and_carry_the_token(server: Recorder) -> None:
    getter = keepalive.Getter(configuration(server.url, token="abc"))
    first = getter.get("/apis/x/one", timeout=5)
    second = getter.get("/apis/x/two", timeout=5)
    assert (first.status, first.json()) == (200, {"path": "/apis/x/one", "status": 200})
    assert second.json()["path"] == "/apis/x/two"
    assert server.requests[0]["port"] == server.requests[1]["port"], "the connection was not kept"
    for seen in server.requests:
        assert seen["headers"]["authorization"] == "Bearer abc"
        assert seen["headers"]["accept"] == "application/json"


def test_http_errors_are_answers(server: Recorder) -> None:
    resp = keepalive.Getter(configuration(server.url)).get("/apis/x/missing", timeout=5)
    assert (resp.status, resp.ok) == (404, False)
    assert "authorization" not in server.requests[0]["headers"]


def test_a_connection_the_server_closed_is_replaced_transparently(server: Recorder) -> None:
    server.close_after_each = True
    getter = keepalive.Getter(configuration(server.url))
    answers = [getter.get(f"/apis/x/{i}", timeout=5).json()["path"] for i in range(4)]
    assert answers == [f"/apis/x/{i}" for i in range(4)]
    ports = [r["port"] for r in server.requests]
    assert len(set(ports)) == 4, "each GET after a server-side close needs a new connection"


def test_credentials_are_asked_for_once_a_second_and_again_after_a_401(
    server: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-cluster tokens rotate: the configuration's refresh hook is asked when the answer is a
    second old, and at once when the API server refuses the token (then the GET is retried)."""
    cfg = configuration(server.url, token="first")
    tokens = iter(["second", "third", "fourth"])
    asked: list[str] = []

    def refresh(c: Any) -> None:
        asked.append(c.api_key["BearerToken"])
        c.api_key["BearerToken"] = next(tokens)

    cfg.refresh_api_key_hook = refresh
    getter = keepalive.Getter(cfg)
    getter.get("/a", timeout=5)
    getter.get("/b", timeout=5)
    assert len(asked) == 1, "asked again within the second"
    monkeypatch.setattr(keepalive, "AUTH_MAX_AGE", 0.0)
    getter.get("/c", timeout=5)
    sent = [r["headers"]["authorization"] for r in server.requests]
    assert sent == ["Bearer second", "Bearer second", "Bearer third"]

    monkeypatch.setattr(keepalive, "AUTH_MAX_AGE", 3600.0)
    server.refuse = "Bearer third"  # rotated away: the server answers 401 to it
    resp = getter.get("/d", timeout=5)
    assert (resp.status, resp.json()["path"]) == (200, "/d")
    assert [r["headers"]["authorization"] for r in server.requests[-2:]] == ["Bearer third", "Bearer fourth"]


def test_a_path_prefix_in_the_server_url_is_kept(server: Recorder) -> None:
    getter = keepalive.Getter(configuration(server.url + "/k8s/"))
    assert getter.get("/api/v1/nodes", timeout=5).json()["path"] == "/k8s/api/v1/nodes"


def test_concurrent_gets_keep_at_most_pool_size_idle_connections(server: Recorder) -> None:
    getter = keepalive.Getter(configuration(server.url), pool_size=4)
    barrier = threading.Barrier(16)
    paths: list[str] = []

    def one(i: int) -> None:
        barrier.wait()
        paths.append(getter.get(f"/c/{i}", timeout=5).json()["path"])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(paths) == sorted(f"/c/{i}" for i in range(16))
    assert len(getter._idle) <= 4


def test_unreachable_server_raises() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once closed
    with pytest.raises(OSError):
        keepalive.Getter(configuration(f"http://127.0.0.1:{port}")).get("/x", timeout=2)


def test_unreachable_api_is_a_claim_source_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    source = KubeClaimSource(client.ApiClient(configuration(f"https://127.0.0.1:{port}")), timeout=2)
    with pytest.raises(ApiError, match="GET ResourceClaim ns/c"):
        source.get("ns", "c")


@pytest.mark.parametrize(
    "setting",
    [{"proxy": "http://proxy.invalid:3128"}, {"tls_server_name": "other"}, {"assert_hostname": "other"}],
)
def test_settings_only_the_official_client_handles_keep_it(setting: dict[str, str]) -> None:
    cfg = configuration("https://127.0.0.1:6443")
    for key, value in setting.items():
        setattr(cfg, key, value)
    assert keepalive.for_configuration(cfg) is None
    assert keepalive.for_configuration(configuration("https://127.0.0.1:6443")) is not None


# --- against the real kube-apiserver ----------------------------------------------------------


@pytest.fixture(scope="module")
def claim_in_api(request: pytest.FixtureRequest) -> Iterator[tuple[Any, str, str]]:
    """(control plane, namespace, claim name) of one allocated-looking claim."""
    try:
        cp = request.getfixturevalue("control_plane")
    except pytest.FixtureLookupError:
        pytest.skip("the control_plane fixture (tests/controlplane) is not available")
    api = cp.api_client()
    ns = f"kubehttp-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    body = claim_body("c1", "x", request="r")
    rest.request(api, "POST", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", body=body)
    yield cp, ns, "c1"
    client.CoreV1Api(api).delete_namespace(ns)


@pytest.mark.controlplane
@pytest.mark.parametrize("credential", ["client certificate", "driver token"])
def test_the_claim_equals_the_official_clients_answer(
    claim_in_api: tuple[Any, str, str], credential: str
) -> None:
    cp, ns, name = claim_in_api
    if credential == "driver token":
        cp.install_driver_access()
        cp.create_node("kubehttp-node")
        api = cp.driver_client("cpu", "kubehttp-node")
    else:
        api = cp.api_client()
    source = KubeClaimSource(api, timeout=10)
    assert source._getter is not None, "the claim GET must take the kept-alive path here"
    official = rest.request(api, "GET", claim_path(ns, name)).json()
    assert source.get(ns, name) == official
    assert source.get(ns, name)["metadata"]["uid"] == official["metadata"]["uid"]
    with pytest.raises(NotFound):
        source.get(ns, "no-such-claim")


@pytest.mark.controlplane
def test_a_wrong_ca_is_refused(claim_in_api: tuple[Any, str, str], tmp_path: Any) -> None:
    cp, ns, name = claim_in_api
    other_ca = tmp_path / "ca.crt"
    other_ca.write_bytes(cp.pki.admin.cert.read_bytes())  # a certificate, but not the server's CA
    cfg = cp.api_client().configuration
    cfg.ssl_ca_cert = str(other_ca)
    with pytest.raises(ApiError, match=r"SSL|certificate"):
        KubeClaimSource(client.ApiClient(cfg), timeout=5).get(ns, name)
