"""topodra.common.kubeapi.rest: calls and watch streams through a `loader.Connection` (the
client's configuration and REST layer, no ApiClient), against a small HTTP/1.1 server on
loopback that records what it is sent and streams watch events in the chunks a test chose."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client
from topodra.common.kubeapi import rest
from topodra.common.kubeapi.errors import ApiError
from topodra.common.kubeapi.loader import Connection
from topodra.common.kubeapi.slices import KubeSliceApi

ADDED = {
    "type": "ADDED",
    "object": {"kind": "ResourceSlice", "metadata": {"name": "a", "resourceVersion": "7"}},
}
GONE = {
    "type": "ERROR",
    "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"},
}


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests: list[dict[str, Any]] = []
        self.chunks: list[bytes] = []  # the watch answer, one HTTP chunk each
        self.status = 200
        self.endless = False  # after the chunks, keep the stream open

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def _record(self, body: bytes) -> None:
        self.server.requests.append(
            {
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body,
            }
        )

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._record(self.rfile.read(length) if length else b"")
        if "watch=true" not in self.path:
            body = json.dumps({"kind": "Status", "code": self.server.status}).encode()
            self.send_response(self.server.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in self.server.chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
            time.sleep(0.02)  # separate reads on the client's side
        while self.server.endless:
            time.sleep(0.05)
        self.wfile.write(b"0\r\n\r\n")

    do_GET = do_PUT = do_POST = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.endless = False
    srv.shutdown()
    srv.server_close()


def connection(url: str) -> Connection:
    cfg = client.Configuration(host=url)
    cfg.api_key = {"BearerToken": "t0ken"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    return Connection(cfg)


def lines(*events: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def test_a_call_sends_what_the_official_api_client_sends(server: Server) -> None:
    """Same method, path, query, token and JSON body through a Connection as through an
    ApiClient; only the User-Agent names us."""
    conn = connection(server.url)
    query = {"fieldSelector": "spec.nodeName=n 1,spec.driver=a/b", "fieldManager": "topodra"}
    body = {"metadata": {"name": "x"}, "spec": {"devices": [{"name": "é"}]}}
    for api in (conn, client.ApiClient(conn.configuration)):
        resp = rest.request(api, "PUT", "/apis/resource.k8s.io/v1/resourceslices/x", query=query, body=body)
        assert resp.status == 200 and resp.json() == {"kind": "Status", "code": 200}
    mine, theirs = server.requests
    for key in ("method", "path"):
        assert mine[key] == theirs[key]
    assert json.loads(mine["body"]) == json.loads(theirs["body"]) == body
    for header in ("authorization", "content-type", "accept"):
        assert mine["headers"][header] == theirs["headers"][header], header
    assert mine["headers"]["authorization"] == "Bearer t0ken"
    assert mine["headers"]["user-agent"] == "topodra"


def test_watch_events_cut_anywhere_arrive_whole(server: Server) -> None:
    second = {**ADDED, "type": "MODIFIED"}
    stream = lines(ADDED, second, {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}})
    cut = len(json.dumps(ADDED)) // 2
    server.chunks = [stream[:cut], stream[cut : cut + 1], stream[cut + 1 : -3], stream[-3:]]
    got = list(rest.WatchEvents(connection(server.url), "/apis/x", {"resourceVersion": "5"}, 5))
    assert got == [ADDED, second, {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}]
    assert server.requests[0]["path"] == "/apis/x?resourceVersion=5&watch=true"


def test_an_error_event_and_a_refused_watch_raise_with_the_status(server: Server) -> None:
    server.chunks = [lines(ADDED, GONE, ADDED)]
    seen: list[dict[str, Any]] = []
    with pytest.raises(ApiError) as gone:
        seen.extend(rest.WatchEvents(connection(server.url), "/apis/x", {}, 5))
    assert seen == [ADDED] and gone.value.status == 410 and "too old resource version" in gone.value.reason
    server.status, server.chunks = 403, [b'{"kind":"Status","message":"slices are forbidden"}']
    with pytest.raises(ApiError) as refused:
        list(rest.WatchEvents(connection(server.url), "/apis/x", {}, 5))
    assert refused.value.status == 403 and refused.value.reason == "slices are forbidden"


def test_stop_from_another_thread_ends_a_quiet_stream(server: Server) -> None:
    """The publisher stops its watch from another thread while the read waits for the server."""
    server.chunks, server.endless = [lines(ADDED)], True
    watch = KubeSliceApi(connection(server.url)).watch_slices("spec.nodeName=n", "1", 60)
    got: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: got.extend(watch), daemon=True)
    reader.start()
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        time.sleep(0.02)
    watch.stop()
    reader.join(10)
    assert not reader.is_alive() and got == [ADDED]
