"""Reconcile against the real kube-apiserver, through a loopback proxy that can answer 404s the way
proxies, load balancers and API servers without resource.k8s.io/v1 do (control-plane tier).

The claim core GETs through the real KubeClaimSource; the proxy forwards to the real API server
with the admin credentials, or answers itself. What is checked is what a running pod would lose:
the driver's holdings (HoldDriver's files), the CDI specs and the checkpointed claims.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from kubernetes import client
from topodra.common.cdi.spec import CdiWriter
from topodra.common.kubeapi import rest
from topodra.common.kubeapi.claims import KubeClaimSource
from topodra.common.runtime.checkpoint import Checkpoint
from topodra.common.runtime.claims import ClaimManager, cdi_kind
from topodra.common.runtime.driver import ClaimRef

from tests.unit.runtime_claims.claimkit import DRIVER, NODE, HoldDriver, KubeClaimStore, Result, claim_object

pytestmark = pytest.mark.controlplane

PLAIN_404 = b"404 page not found\n"  # Go's http.NotFound: ingress controllers, kube-proxy'd gaps
HTML_404 = b"<html><head><title>404 Not Found</title></head><body><h1>404 Not Found</h1></body></html>\n"


class Proxy(ThreadingHTTPServer):
    """Forwards GETs to the API server (`mode` "pass"), or answers every one itself:
    "plain" (text/plain 404), "html" (a load balancer's page), "unserved" (forwarded to
    resource.k8s.io/v1alpha9, which the API server does not serve: its own NotFound Status,
    naming no claim). Records each request's path and query."""

    daemon_threads = True

    def __init__(self, api: Any) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.api = api
        self.mode = "pass"
        self.requests: list[tuple[str, dict[str, str]]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Proxy

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query))
        self.server.requests.append((url.path, query))
        mode = self.server.mode
        if mode == "plain":
            self._answer(404, "text/plain; charset=utf-8", PLAIN_404)
            return
        if mode == "html":
            self._answer(404, "text/html", HTML_404)
            return
        path = url.path
        if mode == "unserved":
            path = path.replace("/resource.k8s.io/v1/", "/resource.k8s.io/v1alpha9/")
        got = rest.request(self.server.api, "GET", path, query=query, timeout=10)
        self._answer(got.status, got.headers.get("Content-Type", "application/json"), got.data)

    def _answer(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def kube_ns(request: pytest.FixtureRequest) -> Iterator[tuple[Any, str]]:
    cp = request.getfixturevalue("control_plane")
    api = cp.api_client()
    ns = f"reconcile-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    yield api, ns
    client.CoreV1Api(api).delete_namespace(ns)


@pytest.fixture
def proxy(kube_ns: tuple[Any, str]) -> Iterator[Proxy]:
    srv = Proxy(kube_ns[0])
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def store(kube_ns: tuple[Any, str]) -> KubeClaimStore:
    return KubeClaimStore(kube_ns[0])


@pytest.fixture
def driver(tmp_path: Path) -> HoldDriver:
    return HoldDriver(tmp_path / "hw")


@pytest.fixture
def manager(proxy: Proxy, driver: HoldDriver, tmp_path: Path) -> Iterator[ClaimManager]:
    cfg = client.Configuration(host=proxy.url)
    cfg.retries = 0
    m = ClaimManager(
        driver,
        NODE,
        KubeClaimSource(client.ApiClient(cfg), timeout=10),
        Checkpoint(tmp_path / "state", DRIVER),
        CdiWriter(tmp_path / "cdi", cdi_kind(DRIVER)),
    )
    m.start()
    yield m
    m.close()


def put(store: KubeClaimStore, ns: str, device: str) -> ClaimRef:
    return store.put(claim_object(ns, f"c-{uuid.uuid4().hex[:8]}", "x", [Result("r", device)]))


def what_pods_hold(m: ClaimManager, driver: HoldDriver, tmp_path: Path) -> tuple[Any, ...]:
    specs = sorted(p.name for p in (tmp_path / "cdi").iterdir())
    return sorted(m.prepared()), driver.holdings(), specs


@pytest.mark.parametrize("mode", ["plain", "html", "unserved"])
def test_a_404_that_is_not_the_api_servers_notfound_unprepares_nothing(
    mode: str,
    kube_ns: tuple[Any, str],
    store: KubeClaimStore,
    proxy: Proxy,
    manager: ClaimManager,
    driver: HoldDriver,
    tmp_path: Path,
) -> None:
    ns = kube_ns[1]
    refs = [put(store, ns, f"dev-{i}") for i in range(3)]
    assert all(not o.error for o in manager.prepare(refs).values())
    before = what_pods_hold(manager, driver, tmp_path)
    assert len(before[0]) == 3 and len(before[1]) == 3 and len(before[2]) == 3

    proxy.mode = mode
    for _ in range(3):
        report = manager.reconcile()
        assert report.unreachable and report.unprepared == [] and report.suspected == []
    assert what_pods_hold(manager, driver, tmp_path) == before

    # the real NotFound still works once the path is healthy again: two rounds, then unprepared
    proxy.mode = "pass"
    store.delete(ns, refs[0].name)
    assert manager.reconcile().suspected == [refs[0].uid]
    assert manager.reconcile().unprepared == [refs[0].uid]
    assert sorted(manager.prepared()) == sorted(r.uid for r in refs[1:])


def test_a_round_where_every_claim_is_not_found_is_not_believed(
    kube_ns: tuple[Any, str], store: KubeClaimStore, manager: ClaimManager, driver: HoldDriver, tmp_path: Path
) -> None:
    """Two claims deleted at once look like a wiped or wrong cluster behind the same address: the
    round is dropped. Once some claim is found again, the NotFound ones count (two rounds)."""
    ns = kube_ns[1]
    a, b = put(store, ns, "dev-0"), put(store, ns, "dev-1")
    assert all(not o.error for o in manager.prepare([a, b]).values())
    before = what_pods_hold(manager, driver, tmp_path)
    store.delete(ns, a.name)
    store.delete(ns, b.name)
    for _ in range(3):
        report = manager.reconcile()
        assert report.aborted and report.unprepared == []
    assert what_pods_hold(manager, driver, tmp_path) == before

    c = put(store, ns, "dev-2")
    assert not manager.prepare([c])[c.uid].error
    report = manager.reconcile()
    assert not report.aborted and sorted(report.suspected) == sorted([a.uid, b.uid])
    assert report.unprepared == [] and report.kept == [c.uid]
    report = manager.reconcile()
    assert sorted(report.unprepared) == sorted([a.uid, b.uid])
    assert sorted(manager.prepared()) == [c.uid] and driver.holdings() == {"dev-2": c.uid}
