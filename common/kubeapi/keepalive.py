"""GETs on the prepare hot path over kept-alive connections of the standard library.

Why: every NodePrepareResources GETs its claim while the kubelet waits. Through the official
client's ApiClient (param_serialize, urllib3's pool manager and retry machinery, its response
wrapper) one GET cost the driver about 1 ms of CPU on the benchmark machine; over a kept-alive
`http.client` connection about half, and the latency dropped with it.

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
round trip, not an error.
Settings this module does not reproduce exactly (a proxy, a TLS server name or a hostname to
assert other than the host's) make `for_configuration` answer None, and callers keep using
`rest.request`.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from topodra.common.kubeapi.loader import CONNECTION_POOL_SIZE
from topodra.common.kubeapi.rest import Response

# A kept-alive connection the server closed meanwhile fails the next request before any answer;
# a GET is idempotent, so it is sent once more on a fresh connection.
_STALE = (http.client.RemoteDisconnected, http.client.BadStatusLine, BrokenPipeError, ConnectionResetError)

USER_AGENT = "topodra"
AUTH_MAX_AGE = 1.0  # seconds an answer of the configuration's credentials is reused


class Getter:
    """GET `path` (already quoted, from `/api` or `/apis`) and read the whole answer.

    Thread-safe: each call takes an idle connection or opens one, and gives it back when the
    server keeps it open; at most `pool_size` idle connections are kept. Raises only for
    transport failures (unreachable, TLS, timeout); HTTP errors are answers.
    """

    def __init__(self, configuration: Any, pool_size: int = CONNECTION_POOL_SIZE) -> None:
        url = urlsplit(configuration.host)
        if url.scheme not in ("https", "http") or not url.hostname:
            raise ValueError(f"API server URL {configuration.host!r} is not http(s)://host[:port]")
        self._cfg = configuration
        self._host = url.hostname
        self._port = url.port
        self._prefix = url.path.rstrip("/")
        self._context = _tls_context(configuration) if url.scheme == "https" else None
        self._pool_size = pool_size
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._auth: tuple[float, dict[str, str]] | None = None  # (when asked, headers)

    def get(self, path: str, timeout: float) -> Response:
        answer = self._get(path, timeout, self._headers(fresh=False))
        if answer.status == 401:  # the credentials may have changed within AUTH_MAX_AGE
            answer = self._get(path, timeout, self._headers(fresh=True))
        return answer

    def _headers(self, fresh: bool) -> dict[str, str]:
        now = time.monotonic()
        auth = self._auth
        if fresh or auth is None or now - auth[0] >= AUTH_MAX_AGE:
            headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
            for setting in self._cfg.auth_settings().values():  # runs the refresh hook
                if setting.get("in") == "header" and setting.get("value"):
                    headers[setting["key"]] = setting["value"]
            self._auth = auth = (now, headers)
        return auth[1]

    def _get(self, path: str, timeout: float, headers: dict[str, str]) -> Response:
        conn, reused = self._take(timeout)
        while True:
            try:
                resp = self._exchange(conn, self._prefix + path, headers)
                answer = Response(resp.status, resp.reason or "", dict(resp.getheaders()), resp.read())
                break
            except _STALE:
                conn.close()
                if not reused:
                    raise
                conn, reused = self._fresh(timeout), False  # once more, on a new connection
            except BaseException:
                conn.close()
                raise
        self._give_back(conn, keep=not resp.will_close)
        return answer

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    @staticmethod
    def _exchange(
        conn: http.client.HTTPConnection, path: str, headers: dict[str, str]
    ) -> http.client.HTTPResponse:
        conn.request("GET", path, headers=headers)
        return conn.getresponse()

    def _take(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            return self._fresh(timeout), False
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, True

    def _fresh(self, timeout: float) -> http.client.HTTPConnection:
        if self._context is None:
            return http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._context)

    def _give_back(self, conn: http.client.HTTPConnection, keep: bool) -> None:
        if keep:
            with self._lock:
                if len(self._idle) < self._pool_size:
                    self._idle.append(conn)
                    return
        conn.close()


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
