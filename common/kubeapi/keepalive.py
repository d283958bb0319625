"""GETs on the prepare hot path over kept-alive connections, with a strictly bounded HTTP/1.1
reader of our own.

Why: every NodePrepareResources GETs its claim while the kubelet waits. Through the official
client's ApiClient (param_serialize, urllib3's pool manager and retry machinery, its response
wrapper) one GET cost the driver about 1 ms of CPU on the benchmark machine; over a kept-alive
`http.client` connection about half. Half of what was left was `http.client` itself: building the
request header by header, several sends, and parsing the answer's header through
`email.parser`. Here the request is one bytes object sent with one `sendall`, and the answer is
read by `_Conn.answer`: 178 against 437 us of CPU per GET of a claim with a token
(hack/bench/claim_get.py, both ways interleaved in one run, load average 5). A kept connection's
socket is non-blocking, and after the request it polls once for the answer before it reads; a
socket with a timeout had its timeout set twice per GET (two ioctl calls), and CPython polled
before each TLS write and after each read that found nothing. Counted with strace: 12.48 -> 8.43
system calls per GET against a loopback TLS server (client and server together: ioctl 2 -> 0,
poll 2 -> 1, read 5 -> 4), and in `topodra serve cpu`'s 64-in-flight rounds, per claim pair,
ioctl 2.01 -> 0, poll 1.23 -> 1.00, read 2.24 -> 2.02. Each system call lets the driver's other threads
take the interpreter lock, which under load costs thread switches.

Everything that decides *how* to talk to the API server still comes from the official client's
`Configuration`, loaded as before by `loader.new_api_client` (in-cluster or kubeconfig): the host,
the CA (file or data), the verify flag, the client certificate, and the credentials through
`Configuration.auth_settings()`, which runs the configuration's refresh hook (the kubelet
rotates the projected in-cluster token; kubeconfig exec plugins refresh theirs).
The credentials are asked for at most once a second (`AUTH_MAX_AGE`): the official loaders'
refresh hooks re-apply the whole configuration on every call, which re-reads the proxy
variables of the environment (with a kubeconfig-loaded token: 1.1-1.3 ms of CPU per GET asking
every time, 0.56-0.60 ms asking once a second, measured in consecutive runs). A 401 answer
asks again at once and retries, so a token that expired within that second costs one extra
round trip, not an error. A credential that a header cannot carry (CR, LF, NUL or another
control character) is refused before anything is sent, and the error does not repeat it.
Settings this module does not reproduce exactly (a proxy, a TLS server name or a hostname to
assert other than the host's) make `for_configuration` answer None, and callers keep using
`rest.request`.

The reader trusts nothing the server sends (an API server can be impersonated by whatever sits
on the path; a proxy or load balancer may answer instead of it): the head (status line and header
fields, or trailer fields) is at most `MAX_HEAD_BYTES` and `MAX_FIELDS` fields, the body at most
`MAX_BODY_BYTES`, at most `MAX_INTERIM` 1xx answers are skipped, and the whole exchange
(connect, TLS handshake, request, answer) must finish within the call's timeout, not only each
read. Framing is strict (RFC 9112): a Content-Length of digits only, equal if repeated; chunked
as the only transfer coding, with hex sizes and CRLF after each chunk; both at once is refused;
with neither the body runs to the close. Header fields folded over lines, without a name, or
with characters a field cannot hold are refused. Anything else is a `ProtocolError` (the caller
retries later, like any transport failure), and the connection is closed. A connection is kept
for the next GET only after an HTTP/1.1 answer that was framed by its length or by chunks, did
not say `Connection: close`, and left no byte unread behind it.
"""

from __future__ import annotations

import re
import select
import socket
import ssl
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from topodra.common.kubeapi.loader import CONNECTION_POOL_SIZE
from topodra.common.kubeapi.rest import Response

USER_AGENT = "topodra"
AUTH_MAX_AGE = 1.0  # seconds an answer of the configuration's credentials is reused

MAX_HEAD_BYTES = 64 << 10  # status line and header fields of one answer (http.client: 64 KiB a line)
MAX_FIELDS = 100  # header (or trailer) fields of one answer, as http.client
MAX_BODY_BYTES = 16 << 20  # the API server accepts at most 3 MiB for one object written
MAX_INTERIM = 8  # 1xx answers skipped before the answer
MAX_CHUNK_LINE = 4096  # a chunk-size line with its extensions
_RECV = 65536

_STATUS_LINE = re.compile(rb"HTTP/(1\.[01]) ([1-9][0-9][0-9])(?: ([\t\x20-\x7e\x80-\xff]*))?")
_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_FIELD = re.compile(rb"(" + _TOKEN + rb"):[ \t]*([\t\x20-\x7e\x80-\xff]*)")
_HEADER_NAME = re.compile(_TOKEN.decode())
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
_TARGET = re.compile(r"/[\x21-\x7e]*")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[\t\x20-\x7e\x80-\xff]*)?")
_NO_BODY = (204, 304)


class ProtocolError(Exception):
    """The server's answer breaks HTTP/1.1 or one of this module's bounds."""


class _Stale(Exception):
    """A kept-alive connection the server closed meanwhile: it failed before any byte of an
    answer came, so the GET (idempotent) is sent once more on a fresh connection."""


class Getter:
    """GET `path` (already quoted, from `/api` or `/apis`) and read the whole answer.

    Thread-safe: each call takes an idle connection or opens one, and gives it back when the
    server keeps it open; at most `pool_size` idle connections are kept. Raises only for
    transport failures (unreachable, TLS, timeout, `ProtocolError`); HTTP errors are answers.
    """

    def __init__(self, configuration: Any, pool_size: int = CONNECTION_POOL_SIZE) -> None:
        url = urlsplit(configuration.host)
        if url.scheme not in ("https", "http") or not url.hostname:
            raise ValueError(f"API server URL {configuration.host!r} is not http(s)://host[:port]")
        self._cfg = configuration
        self._host = url.hostname
        # An ASCII name (an IP address, as in-cluster, or a plain DNS name) goes to getaddrinfo
        # and TLS as bytes: as text, both encode it with the "idna" codec, whose first use loads
        # encodings.idna, stringprep and unicodedata (about 0.2 MiB resident, for nothing).
        self._connect_host: str | bytes = self._host.encode("ascii") if self._host.isascii() else self._host
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._prefix = url.path.rstrip("/")
        if not _TARGET.fullmatch(self._prefix + "/"):
            raise ValueError(f"API server URL {configuration.host!r} has a path a request cannot carry")
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._host_field = f"{host}:{url.port}" if url.port else host
        self._context = _tls_context(configuration) if url.scheme == "https" else None
        self._pool_size = pool_size
        self._idle: list[_Conn] = []
        self._lock = threading.Lock()
        self._auth: tuple[float, bytes] | None = None  # (when asked, the request's header fields)

    def get(self, path: str, timeout: float) -> Response:
        if not _TARGET.fullmatch(path):
            raise ValueError(f"request path {path[:200]!r} holds characters a request line cannot carry")
        target = (self._prefix + path).encode("ascii")
        answer = self._get(target, timeout, self._fields(fresh=False))
        if answer.status == 401:  # the credentials may have changed within AUTH_MAX_AGE
            answer = self._get(target, timeout, self._fields(fresh=True))
        return answer

    def _fields(self, fresh: bool) -> bytes:
        """The request's header fields after the request line, the credentials included."""
        now = time.monotonic()
        auth = self._auth
        if fresh or auth is None or now - auth[0] >= AUTH_MAX_AGE:
            headers = {
                "Host": self._host_field,
                "Accept": "application/json",
                "Accept-Encoding": "identity",
                "User-Agent": USER_AGENT,
            }
            for setting in self._cfg.auth_settings().values():  # runs the refresh hook
                if setting.get("in") == "header" and setting.get("value"):
                    headers[str(setting["key"])] = str(setting["value"])
            lines = []
            for name, value in headers.items():
                if not _HEADER_NAME.fullmatch(name) or not _HEADER_VALUE.fullmatch(value):
                    # never the value in the message: it is a credential
                    raise ValueError(
                        f"the configuration's {name[:100]!r} header holds characters a header cannot carry"
                    )
                lines.append(f"{name}: {value}\r\n")
            self._auth = auth = (now, "".join(lines).encode("latin-1") + b"\r\n")
        return auth[1]

    def _get(self, target: bytes, timeout: float, fields: bytes) -> Response:
        deadline = time.monotonic() + timeout
        request = b"GET " + target + b" HTTP/1.1\r\n" + fields
        conn = self._take()
        reused = conn is not None
        if conn is None:
            conn = self._connect(timeout)
        while True:
            try:
                answer, keep = conn.exchange(request, deadline, reused)
                break
            except _Stale:
                conn.close()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no complete answer within the timeout") from None
                conn, reused = self._connect(left), False  # once more, on a new connection
            except BaseException:
                conn.close()
                raise
        self._give_back(conn, keep)
        return answer

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _take(self) -> _Conn | None:
        with self._lock:
            return self._idle.pop() if self._idle else None

    def _connect(self, timeout: float) -> _Conn:
        # typeshed says str; create_connection hands the host to getaddrinfo, which takes bytes
        sock = socket.create_connection((self._connect_host, self._port), timeout)  # type: ignore[arg-type]
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._context is not None:
                sock = self._context.wrap_socket(sock, server_hostname=self._connect_host)
        except BaseException:
            sock.close()
            raise
        return _Conn(sock)

    def _give_back(self, conn: _Conn, keep: bool) -> None:
        if keep:
            with self._lock:
                if len(self._idle) < self._pool_size:
                    self._idle.append(conn)
                    return
        conn.close()


class _Conn:
    """One connection (connected, TLS handshake done) and what was received on it and not
    consumed yet. Its socket is non-blocking from here on: every wait is `_wait`'s poll, up to
    the exchange's deadline."""

    __slots__ = ("_buf", "_deadline", "_pending", "_pos", "_readable", "_sock")

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._buf = bytearray()
        self._pos = 0
        self._deadline = 0.0
        self._readable = select.poll()
        self._readable.register(sock, select.POLLIN)
        # what TLS has decrypted and not handed over yet (no such buffer without TLS)
        self._pending = sock.pending if isinstance(sock, ssl.SSLSocket) else (lambda: 0)

    def close(self) -> None:
        self._sock.close()

    def exchange(self, request: bytes, deadline: float, reused: bool) -> tuple[Response, bool]:
        """Send `request`, read its answer: (answer, whether the connection may be reused)."""
        self._deadline = deadline
        self._buf = bytearray()
        self._pos = 0
        try:
            self._send(request)
            if not self._pending():  # right after the request the answer is seldom there yet
                self._wait(select.POLLIN)
            if reused and not self._fill():
                raise _Stale
        except (BrokenPipeError, ConnectionResetError):
            if reused:
                raise _Stale from None
            raise
        return self.answer()

    def answer(self) -> tuple[Response, bool]:
        for _ in range(MAX_INTERIM + 1):
            version, status, reason, fields = self._head()
            if status >= 200:
                break
            if status == 101:
                raise ProtocolError("the server switched protocols, which was not asked for")
        else:
            raise ProtocolError(f"more than {MAX_INTERIM} interim (1xx) answers")
        headers: dict[str, str] = {}
        lengths: set[bytes] = set()
        codings: list[bytes] = []
        close = version != b"1.1"  # HTTP/1.0: never kept (stricter than http.client)
        for name, value in fields:
            lower = name.lower()
            if lower == b"content-length":
                lengths.update(v.strip(b" \t") for v in value.split(b","))
            elif lower == b"transfer-encoding":
                codings.append(value)
            elif lower == b"connection":
                close = close or b"close" in [t.strip(b" \t") for t in value.lower().split(b",")]
            elif lower == b"content-encoding" and value.lower() not in (b"", b"identity"):
                raise ProtocolError("the answer is compressed, which was not asked for")
            headers[name.decode("latin-1")] = value.decode("latin-1")
        if codings and lengths:
            raise ProtocolError("the answer has both a Content-Length and a Transfer-Encoding")
        if status in _NO_BODY:
            body, framed = b"", not codings and lengths <= {b"0"}
        elif codings:
            if len(codings) != 1 or codings[0].lower() != b"chunked":
                raise ProtocolError("the answer's Transfer-Encoding is not chunked")
            body, framed = self._chunked(), True
        elif lengths:
            body, framed = self._exact(_content_length(lengths)), True
        else:
            body, framed = self._to_close(), False
        keep = framed and not close and self._pos == len(self._buf)
        return Response(status, reason, headers, body), keep

    # --- reading, every loop bounded ----------------------------------------------------------

    def _wait(self, event: int) -> None:
        """Until the socket is ready for `event` (select.POLLIN or POLLOUT), at most until the
        deadline. Readiness for an error or a hang-up counts: the next call reports it."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no complete answer within the timeout")
        if event == select.POLLIN:
            waiter = self._readable
        else:
            waiter = select.poll()
            waiter.register(self._sock, event)
        if not waiter.poll(left * 1000 + 1):  # milliseconds, rounded up past the deadline
            raise TimeoutError("no complete answer within the timeout")

    def _send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[self._sock.send(view) :]
            except (BlockingIOError, ssl.SSLWantWriteError):
                self._wait(select.POLLOUT)
            except ssl.SSLWantReadError:  # TLS may need to read before it writes
                self._wait(select.POLLIN)

    def _fill(self) -> bool:
        """Receive more; False at the end of the stream. Raises TimeoutError past the deadline
        (checked before each read too: a server that trickles bytes does not get past it)."""
        if time.monotonic() >= self._deadline:
            raise TimeoutError("no complete answer within the timeout")
        while True:
            try:
                data = self._sock.recv(_RECV)  # what TLS already decrypted comes without a wait
                break
            except (BlockingIOError, ssl.SSLWantReadError):
                self._wait(select.POLLIN)
            except ssl.SSLWantWriteError:  # TLS may need to write before it reads
                self._wait(select.POLLOUT)
        if not data:
            return False
        self._buf += data  # never more than one answer's bounds: it starts empty for each
        return True

    def _until(self, end: bytes, limit: int, what: str) -> bytes:
        """The bytes up to `end` (consumed with it), at most `limit` of them."""
        start = searched = self._pos
        while (at := self._buf.find(end, searched)) < 0:
            if len(self._buf) - start > limit:
                raise ProtocolError(f"{what} longer than {limit} bytes")
            searched = max(start, len(self._buf) - len(end) + 1)
            if not self._fill():
                raise ProtocolError(f"the server closed the connection in the middle of {what}")
        if at - start > limit:
            raise ProtocolError(f"{what} longer than {limit} bytes")
        self._pos = at + len(end)
        return bytes(self._buf[start:at])

    def _head(self) -> tuple[bytes, int, str, list[tuple[bytes, bytes]]]:
        block = self._until(b"\r\n\r\n", MAX_HEAD_BYTES, "the answer's head")
        lines = block.split(b"\r\n")
        status_line = _STATUS_LINE.fullmatch(lines[0])
        if status_line is None:
            raise ProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
        version, status, reason = status_line.groups()
        return version, int(status), (reason or b"").decode("ascii", "replace"), _fields(lines[1:])

    def _exact(self, n: int) -> bytes:
        while len(self._buf) - self._pos < n:
            if not self._fill():
                raise ProtocolError(
                    f"the connection closed after {len(self._buf) - self._pos} of {n} bytes of the body"
                )
        start = self._pos
        self._pos = start + n
        return bytes(self._buf[start : start + n])

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self._until(b"\r\n", MAX_CHUNK_LINE, "a chunk-size line")
            size_match = _CHUNK_SIZE.fullmatch(line)
            if size_match is None:
                raise ProtocolError(f"not a chunk size: {line[:40]!r}")
            size = int(size_match.group(1), 16)
            if size == 0:
                break
            total += size
            if total > MAX_BODY_BYTES:
                raise ProtocolError(f"the body is longer than {MAX_BODY_BYTES} bytes")
            parts.append(self._exact(size))
            if self._exact(2) != b"\r\n":
                raise ProtocolError("a chunk does not end where its size says")
        # trailer fields: read within the head's bounds, checked, and dropped (nothing needs them)
        start = self._pos
        count = 0
        while line := self._until(b"\r\n", MAX_HEAD_BYTES, "the trailer fields"):
            count += 1
            if count > MAX_FIELDS or self._pos - start > MAX_HEAD_BYTES:
                raise ProtocolError(f"trailer fields over {MAX_FIELDS} fields or {MAX_HEAD_BYTES} bytes")
            _fields([line])
        return b"".join(parts)

    def _to_close(self) -> bytes:
        while True:
            if len(self._buf) - self._pos > MAX_BODY_BYTES:
                raise ProtocolError(f"the body is longer than {MAX_BODY_BYTES} bytes")
            if not self._fill():
                break
        return self._exact(len(self._buf) - self._pos)


def _fields(lines: list[bytes]) -> list[tuple[bytes, bytes]]:
    if len(lines) > MAX_FIELDS:
        raise ProtocolError(f"more than {MAX_FIELDS} header fields")
    fields = []
    for line in lines:
        match = _FIELD.fullmatch(line)
        if match is None:  # no name, a space before the colon, a fold, a control character
            raise ProtocolError(f"not a header field: {line[:80]!r}")
        fields.append((match.group(1), match.group(2).rstrip(b" \t")))
    return fields


def _content_length(values: set[bytes]) -> int:
    if len(values) != 1:
        raise ProtocolError("the answer has Content-Length values that differ")
    (value,) = values
    if not value.isdigit() or len(value) > 12:
        raise ProtocolError(f"not a Content-Length: {value[:40]!r}")
    n = int(value)
    if n > MAX_BODY_BYTES:
        raise ProtocolError(f"the body is longer than {MAX_BODY_BYTES} bytes ({n})")
    return n


def _tls_context(cfg: Any) -> ssl.SSLContext:
    """The TLS settings of the official client's REST layer, as an `ssl` context."""
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None, cadata=cfg.ca_cert_data or None)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif cfg.assert_hostname is False:
        ctx.check_hostname = False
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file or None)
    return ctx


def for_configuration(configuration: Any, pool_size: int = CONNECTION_POOL_SIZE) -> Getter | None:
    """A Getter speaking exactly as the official client would with this configuration, or None
    when the configuration needs something only the official client does (see the docstring)."""
    if configuration.proxy or configuration.tls_server_name:
        return None
    assert_hostname = configuration.assert_hostname
    if assert_hostname not in (None, False, True):
        return None  # a name to check other than the host's
    if urlsplit(configuration.host).scheme not in ("https", "http"):
        return None
    return Getter(configuration, pool_size)
