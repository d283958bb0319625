"""topodra.common.kubeapi.keepalive against answers no API server should send.

The server here is a raw loopback socket that answers each request with bytes written out in the
test, so that every malformed head, framing and body can be produced exactly (a real HTTP server
library would refuse to send most of them). Each bound of the reader has a case that fails when
the bound is removed: the answer would be accepted, or the read would run past the timeout.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client
from topodra.common.kubeapi import keepalive
from topodra.common.kubeapi.claims import KubeClaimSource
from topodra.common.kubeapi.errors import ApiError, NotFound

# what the server does for one request: send these bytes (then keep the connection open), or
# call the function with the connection (it answers whether to keep reading requests on it)
Reply = bytes | Callable[[socket.socket], bool]


class RawServer:
    """Answers the n-th request it receives (over all connections) with `replies[n]` (the last
    one again past the end), and records each request's bytes and client port."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = replies
        self.requests: list[tuple[bytes, int]] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._conns: list[socket.socket] = []
        self._done = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    @property
    def ports(self) -> list[int]:
        return [port for _, port in self.requests]

    def _accept(self) -> None:
        while not self._done:
            try:
                conn, addr = self._sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn, addr[1]), daemon=True).start()

    def _serve(self, conn: socket.socket, port: int) -> None:
        data = b""
        try:
            while True:
                while b"\r\n\r\n" not in data:
                    more = conn.recv(65536)
                    if not more:
                        return
                    data += more
                request, _, data = data.partition(b"\r\n\r\n")
                self.requests.append((request, port))
                reply = self.replies[min(len(self.requests), len(self.replies)) - 1]
                if isinstance(reply, bytes):
                    conn.sendall(reply)
                elif not reply(conn):
                    conn.close()
                    return
        except OSError:
            return

    def close(self) -> None:
        self._done = True
        self._sock.close()
        for conn in self._conns:
            conn.close()


@pytest.fixture
def raw() -> Iterator[Callable[..., RawServer]]:
    servers: list[RawServer] = []

    def make(*replies: Reply) -> RawServer:
        servers.append(RawServer(list(replies)))
        return servers[-1]

    yield make
    for srv in servers:
        srv.close()


def getter(url: str, token: str | None = None) -> keepalive.Getter:
    cfg = client.Configuration(host=url)
    if token is not None:
        cfg.api_key = {"BearerToken": token}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
    return keepalive.Getter(cfg)


def ok(body: bytes = b'{"a":1}', extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + extra
        + (b"Content-Length: %d\r\n\r\n" % len(body) + body)
    )


def then_close(data: bytes) -> Callable[[socket.socket], bool]:
    def send(conn: socket.socket) -> bool:
        conn.sendall(data)
        return False

    return send


def trickle(data: bytes, every: float) -> Callable[[socket.socket], bool]:
    def send(conn: socket.socket) -> bool:
        for i in range(len(data)):
            conn.sendall(data[i : i + 1])
            time.sleep(every)
        return True

    return send


HEAD = b"HTTP/1.1 200 OK\r\n"
CHUNKED = HEAD + b"Transfer-Encoding: chunked\r\n\r\n"

BAD_ANSWERS: dict[str, tuple[Reply, str]] = {
    # the head's bounds
    "one header longer than the head's bound": (
        HEAD + b"X-Big: " + b"a" * (64 << 10) + b"\r\n\r\n",
        "longer than",
    ),
    "a head that never ends": (HEAD + b"X-A: 1\r\n" * 9000, "longer than"),
    "101 header fields": (HEAD + b"".join(b"X-%d: 1\r\n" % i for i in range(101)) + b"\r\n", "header fields"),
    # status lines
    "HTTP/2 status line": (b"HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n", "status line"),
    "not HTTP at all (HTTP/0.9 body)": (b'{"kind":"Status"}\r\n\r\n', "status line"),
    "two-digit status": (b"HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n", "status line"),
    "four-digit status": (b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n", "status line"),
    "status 099": (b"HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n", "status line"),
    "bare LF line ends": (b"HTTP/1.1 200 OK\nContent-Length: 2\n\n{}\r\n\r\n", "status line"),
    "a control character in the reason": (
        b"HTTP/1.1 500 Bad\x1b[31m\r\nContent-Length: 0\r\n\r\n",
        "status line",
    ),
    # header fields
    "a folded header field": (HEAD + b"X-A: 1\r\n continued\r\nContent-Length: 0\r\n\r\n", "header field"),
    "a field without a colon": (HEAD + b"Garbage\r\nContent-Length: 0\r\n\r\n", "header field"),
    "a space before the colon": (HEAD + b"Content-Length : 0\r\n\r\n", "header field"),
    "a NUL in a value": (HEAD + b"X-A: a\x00b\r\nContent-Length: 0\r\n\r\n", "header field"),
    "a bare CR in a value": (HEAD + b"X-A: a\rb\r\nContent-Length: 0\r\n\r\n", "header field"),
    "a bare LF in a value": (HEAD + b"X-A: a\nb\r\nContent-Length: 0\r\n\r\n", "header field"),
    # framing
    "Content-Length and Transfer-Encoding": (
        HEAD + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "both",
    ),
    "Content-Length values that differ": (
        HEAD + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{} ",
        "differ",
    ),
    "a list of Content-Lengths that differ": (HEAD + b"Content-Length: 2, 3\r\n\r\n{} ", "differ"),
    "Content-Length +2": (HEAD + b"Content-Length: +2\r\n\r\n{}", "Content-Length"),
    "Content-Length -1": (HEAD + b"Content-Length: -1\r\n\r\n{}", "Content-Length"),
    "Content-Length 0x2": (HEAD + b"Content-Length: 0x2\r\n\r\n{}", "Content-Length"),
    "Content-Length 2a": (HEAD + b"Content-Length: 2a\r\n\r\n{}", "Content-Length"),
    "a gzip transfer coding": (HEAD + b"Transfer-Encoding: gzip\r\n\r\n{}", "not chunked"),
    "gzip then chunked": (
        HEAD + b"Transfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        "not chunked",
    ),
    "chunked twice": (
        HEAD + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        "not chunked",
    ),
    "a compressed body": (ok(extra=b"Content-Encoding: gzip\r\n"), "compressed"),
    "switching protocols": (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", "switched"),
    "endless 100 Continue": (b"HTTP/1.1 100 Continue\r\n\r\n" * 9 + ok(), "interim"),
    # chunks
    "chunk size zz": (CHUNKED + b"zz\r\nhello\r\n0\r\n\r\n", "chunk size"),
    "chunk size -5": (CHUNKED + b"-5\r\nhello\r\n0\r\n\r\n", "chunk size"),
    "chunk size +5": (CHUNKED + b"+5\r\nhello\r\n0\r\n\r\n", "chunk size"),
    "chunk size 0x5": (CHUNKED + b"0x5\r\nhello\r\n0\r\n\r\n", "chunk size"),
    "chunk size with a leading space": (CHUNKED + b" 5\r\nhello\r\n0\r\n\r\n", "chunk size"),
    "chunk size of 17 hex digits": (CHUNKED + b"1" * 17 + b"\r\nhello\r\n0\r\n\r\n", "chunk size"),
    "an endless chunk-size line": (CHUNKED + b"5" + b";x" * 4096, "longer than"),
    "a chunk longer than its size": (CHUNKED + b"5\r\nhelloX\r\n0\r\n\r\n", "does not end"),
    "a chunk cut by the close": (then_close(CHUNKED + b"10\r\nhello"), "closed"),
    "no last chunk before the close": (then_close(CHUNKED + b"5\r\nhello\r\n"), "closed"),
    "101 trailer fields": (
        CHUNKED + b"2\r\n{}\r\n0\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(101)) + b"\r\n",
        "trailer fields",
    ),
    "a malformed trailer field": (CHUNKED + b"2\r\n{}\r\n0\r\nno colon\r\n\r\n", "header field"),
    # bodies
    "a body cut by the close": (
        then_close(HEAD + b"Content-Length: 100\r\n\r\n" + b"x" * 10),
        "closed after 10 of 100",
    ),
    "a close before any answer": (then_close(b""), "closed"),
    "a close in the middle of the head": (then_close(HEAD + b"Content-Le"), "closed"),
}


@pytest.mark.parametrize("case", BAD_ANSWERS)
def test_a_malformed_answer_is_a_protocol_error_and_never_retried(
    raw: Callable[..., RawServer], case: str
) -> None:
    reply, message = BAD_ANSWERS[case]
    srv = raw(reply)
    g = getter(srv.url)
    with pytest.raises(keepalive.ProtocolError, match=message):
        g.get("/apis/x/c", timeout=5)
    assert len(srv.requests) == 1, "a malformed answer on a fresh connection must not be asked again"
    assert g._idle == [], "a connection with a malformed answer must not be kept"


@pytest.mark.parametrize(
    ("case", "reply"),
    [
        ("Content-Length", lambda n: HEAD + b"Content-Length: %d\r\n\r\n" % n + b"x" * n),
        ("chunks", lambda n: CHUNKED + (b"%x\r\n" % (n // 2) + b"x" * (n // 2) + b"\r\n") * 2 + b"0\r\n\r\n"),
        ("the close", lambda n: then_close(HEAD + b"\r\n" + b"x" * n)),
    ],
)
def test_a_body_over_the_bound_is_refused_however_it_is_framed(
    raw: Callable[..., RawServer], monkeypatch: pytest.MonkeyPatch, case: str, reply: Callable[[int], Reply]
) -> None:
    monkeypatch.setattr(keepalive, "MAX_BODY_BYTES", 1000)
    g = getter(raw(reply(1000), reply(1002)).url)
    assert g.get("/at-the-bound", timeout=5).data == b"x" * 1000, case
    with pytest.raises(keepalive.ProtocolError, match="longer than 1000"):
        g.get("/over-the-bound", timeout=5)


def test_the_timeout_bounds_the_whole_answer_not_each_read(raw: Callable[..., RawServer]) -> None:
    """A server sending a byte every 0.1 s never lets one read wait 1 s; the answer as a whole
    must still end at the timeout."""
    srv = raw(trickle(ok(b"x" * 40), every=0.1))
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        getter(srv.url).get("/slow", timeout=1)
    assert time.monotonic() - started < 2.5


def test_an_answer_without_its_body_times_out(raw: Callable[..., RawServer]) -> None:
    """As if answering a HEAD: a length, and no body, on a connection left open."""
    srv = raw(HEAD + b"Content-Length: 50\r\n\r\n")
    with pytest.raises(TimeoutError):
        getter(srv.url).get("/head-like", timeout=1)


def test_an_answer_that_is_never_closed_or_framed_times_out(raw: Callable[..., RawServer]) -> None:
    srv = raw(HEAD + b"\r\n" + b"x" * 10)
    with pytest.raises(TimeoutError):
        getter(srv.url).get("/unframed", timeout=1)


GOOD_ANSWERS: dict[str, tuple[Reply, bytes, bool]] = {
    # case: (reply, body read, whether the connection is kept)
    "Content-Length": (ok(), b'{"a":1}', True),
    "a repeated equal Content-Length": (
        HEAD + b"Content-Length: 2\r\nContent-Length: 2, 2\r\n\r\n{}",
        b"{}",
        True,
    ),
    "interim answers first": (
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + ok(),
        b'{"a":1}',
        True,
    ),
    "chunks with extensions and trailers": (
        CHUNKED + b'3;name=v\r\n{"a\r\n4 \r\n":1}\r\n0\r\nX-Trailer: t\r\n\r\n',
        b'{"a":1}',
        True,
    ),
    "upper-case chunk sizes and coding": (
        HEAD + b"transfer-encoding: Chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n",
        b"0123456789",
        True,
    ),
    "no content (204)": (b"HTTP/1.1 204 No Content\r\n\r\n", b"", True),
    "Connection: close": (ok(extra=b"Connection: keep-alive, close\r\n"), b'{"a":1}', False),
    "HTTP/1.0, even with keep-alive": (
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n{}",
        b"{}",
        False,
    ),
    "a body ending at the close": (then_close(HEAD + b"\r\n" + b"{}"), b"{}", False),
    "bytes past the body": (ok(b"{}") + b"HTTP/1.1 200 OK\r\n", b"{}", False),
    "a body of a MiB": (ok(b"x" * (1 << 20)), b"x" * (1 << 20), True),
}


@pytest.mark.parametrize("case", GOOD_ANSWERS)
def test_well_formed_answers_and_when_their_connection_is_kept(
    raw: Callable[..., RawServer], case: str
) -> None:
    reply, body, kept = GOOD_ANSWERS[case]
    srv = raw(reply, ok(b"second"))
    g = getter(srv.url)
    assert g.get("/first", timeout=5).data == body
    assert g.get("/second", timeout=5).data == b"second"
    assert (srv.ports[0] == srv.ports[1]) is kept, srv.ports


def test_status_reason_and_headers_reach_the_answer(raw: Callable[..., RawServer]) -> None:
    srv = raw(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: 2\r\n\r\n{}")
    resp = getter(srv.url).get("/x", timeout=5)
    assert (resp.status, resp.reason, resp.headers["Retry-After"], resp.ok) == (
        429,
        "Too Many Requests",
        "3",
        False,
    )


def test_the_request_is_one_well_formed_get(raw: Callable[..., RawServer]) -> None:
    srv = raw(ok())
    getter(srv.url, token="tok").get("/apis/x/c?resourceVersion=0", timeout=5)
    port = srv.url.rsplit(":", 1)[1]
    assert srv.requests[0][0].split(b"\r\n") == [
        b"GET /apis/x/c?resourceVersion=0 HTTP/1.1",
        b"Host: 127.0.0.1:" + port.encode(),
        b"Accept: application/json",
        b"Accept-Encoding: identity",
        b"User-Agent: topodra",
        b"authorization: Bearer tok",
    ]


def test_a_reused_connection_that_answers_garbage_is_not_asked_again(raw: Callable[..., RawServer]) -> None:
    """Only a connection that fails before any byte of an answer is a stale one worth a retry."""
    srv = raw(ok(), b"garbage\r\n\r\n")
    g = getter(srv.url)
    g.get("/first", timeout=5)
    with pytest.raises(keepalive.ProtocolError):
        g.get("/second", timeout=5)
    assert len(srv.requests) == 2


@pytest.mark.parametrize("token", ["abc\r\nX-Injected: 1", "abc\ndef", "abc\x00", "abc\x7f", "abc\u0100"])
def test_a_token_a_header_cannot_carry_is_never_sent(raw: Callable[..., RawServer], token: str) -> None:
    srv = raw(ok())
    with pytest.raises(ValueError, match=r"(?i)authorization") as err:
        getter(srv.url, token=token).get("/x", timeout=5)
    assert "abc" not in str(err.value), "the error must not repeat the credential"
    assert srv.requests == []


@pytest.mark.parametrize("path", ["/a b", "/a\r\nX: 1", "relative", "/caf\u00e9", "/a\x00"])
def test_a_path_a_request_line_cannot_carry_is_refused(raw: Callable[..., RawServer], path: str) -> None:
    srv = raw(ok())
    with pytest.raises(ValueError, match="request path"):
        getter(srv.url).get(path, timeout=5)
    assert srv.requests == []


# --- what the answers mean to the claim source -------------------------------------------------


def source(url: str) -> KubeClaimSource:
    return KubeClaimSource(client.ApiClient(client.Configuration(host=url)), timeout=5)


def status_404(name: str) -> bytes:
    body = (
        b'{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,'
        b'"details":{"name":"%s","group":"resource.k8s.io","kind":"resourceclaims"}}' % name.encode()
    )
    return (
        b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        + body
    )


def test_only_the_api_servers_own_not_found_is_not_found(raw: Callable[..., RawServer]) -> None:
    html = b"<html><body>404 page not found</body></html>"
    srv = raw(
        status_404("c"),
        b"HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(html) + html,
        status_404("another"),
    )
    src = source(srv.url)
    with pytest.raises(NotFound):
        src.get("ns", "c")
    for _ in range(2):  # a proxy's HTML 404, and a NotFound naming another object
        with pytest.raises(ApiError) as err:
            src.get("ns", "c")
        assert type(err.value) is ApiError and err.value.status == 404


def test_a_malformed_answer_is_a_retryable_claim_source_error(raw: Callable[..., RawServer]) -> None:
    srv = raw(HEAD + b"Content-Length: x\r\n\r\n")
    with pytest.raises(ApiError, match="ProtocolError") as err:
        source(srv.url).get("ns", "c")
    assert err.value.status is None


def test_retry_after_reaches_the_claim_source_error(raw: Callable[..., RawServer]) -> None:
    srv = raw(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: 2\r\n\r\n{}")
    with pytest.raises(ApiError) as err:
        source(srv.url).get("ns", "c")
    assert (err.value.status, err.value.retry_after) == (429, 3.0)
