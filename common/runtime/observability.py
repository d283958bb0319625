"""HTTP on `--metrics-address`: Prometheus metrics, liveness and readiness.

- `/metrics`: prometheus-client's default registry (runtime metrics plus process metrics).
- `/healthz` (liveness): 200 while every plugin's gRPC servers are up; restarting the pod is
  the cure when they are not.
- `/readyz` (readiness): 200 once the kubelet also confirmed registration of every driver;
  503 otherwise, with the per-driver reason, e.g. the kubelet's rejection message.
Both health bodies are JSON with one entry per driver.

The port answers anyone who can reach it (the NIC driver's is on the host network), so what a
client costs is bounded: at most `max_connections` connections are served at once, one thread
each. A connection that has not sent its whole request within `read_timeout` seconds is closed,
however slowly it trickles bytes (a per-read timeout alone would let one byte every few seconds
hold a thread forever), and requests are HTTP/1.0, one per connection. Probes and a Prometheus
scrape need one or two connections for milliseconds.

When every slot is taken, the oldest connection is closed to make room for the new one (a probe
or a scrape is over in milliseconds, so the oldest is the one that is slow to send its request
or to read its answer). Otherwise anyone on the network could hold every slot with half-sent
requests, or with answers it never reads, renewed before their deadline, and the kubelet's
probes would fail until it restarted the driver, again and again.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from topodra.common import logs
from topodra.common.runtime.plugin import PluginStatus

_log = logs.get(__name__)


def parse_address(address: str) -> tuple[str, int]:
    """`host:port`, `:port` (all interfaces) or `[v6]:port`."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"metrics address {address!r} is not host:port")
    host = host.strip("[]")
    return host or "0.0.0.0", int(port)


MAX_CONNECTIONS = 16
READ_TIMEOUT = 5.0  # seconds for a whole request to arrive
EVICT_WAIT = 1.0  # seconds for an evicted connection's thread to free its slot


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = MAX_CONNECTIONS

    def __init__(
        self,
        address: tuple[str, int],
        statuses: Callable[[], Sequence[PluginStatus]],
        max_connections: int,
        read_timeout: float,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)
        self.statuses = statuses
        self.read_timeout = read_timeout
        self.refused = 0  # connections closed at once because every slot was taken
        self.evicted = 0  # connections closed to make room for a new one
        self._slots = threading.BoundedSemaphore(max_connections)
        self._reading: dict[socket.socket, float] = {}  # connection -> when its request is overdue
        self._active: dict[socket.socket, float] = {}  # connection -> when its handler started
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._reaper = threading.Thread(target=self._reap, name="metrics-http-reaper", daemon=True)
        self._reaper.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False) and not (
            self._evict_oldest() and self._slots.acquire(timeout=EVICT_WAIT)
        ):
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def reading(self, conn: socket.socket, done: bool) -> None:
        with self._lock:
            if done:
                self._reading.pop(conn, None)
            else:
                self._active[conn] = time.monotonic()
                self._reading[conn] = time.monotonic() + self.read_timeout

    def finished(self, conn: socket.socket) -> None:
        with self._lock:
            self._active.pop(conn, None)
            self._reading.pop(conn, None)

    def _evict_oldest(self) -> bool:
        """Close the connection served longest (its thread then ends and frees its slot); False
        when there is none yet (every slot is between its accept and its handler's start)."""
        with self._lock:
            if not self._active:
                return False
            oldest = min(self._active, key=self._active.__getitem__)
            del self._active[oldest]
            self._reading.pop(oldest, None)
        self.evicted += 1
        with contextlib.suppress(OSError):
            oldest.shutdown(socket.SHUT_RDWR)
        return True

    def _reap(self) -> None:
        """Closes the reading side of connections whose request is overdue: the handler's blocked
        read then ends, and so does its thread."""
        while not self._closed.wait(min(1.0, self.read_timeout / 4)):
            now = time.monotonic()
            with self._lock:
                late = [c for c, due in self._reading.items() if due < now]
                for c in late:
                    del self._reading[c]
            for c in late:
                with contextlib.suppress(OSError):
                    c.shutdown(socket.SHUT_RDWR)

    def server_close(self) -> None:
        self._closed.set()
        super().server_close()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.read_timeout)  # each read and write
        self.server.reading(self.connection, done=False)

    def parse_request(self) -> bool:
        ok = super().parse_request()  # reads the headers
        self.server.reading(self.connection, done=True)  # the request is in: reading is over
        return ok

    def finish(self) -> None:
        self.server.finished(self.connection)
        super().finish()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
        elif path in ("/healthz", "/livez", "/readyz"):
            statuses = list(self.server.statuses())
            if path == "/readyz":
                ok = bool(statuses) and all(s.ready for s in statuses)
            else:
                ok = bool(statuses) and all(s.serving for s in statuses)
            body = {"ok": ok, "drivers": [{**asdict(s), "ready": s.ready} for s in statuses]}
            self._send(200 if ok else 503, json.dumps(body).encode(), "application/json")
        else:
            self._send(404, b"not found\n", "text/plain")

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds: no noise
        pass


class Observability:
    def __init__(
        self,
        address: str,
        statuses: Callable[[], Sequence[PluginStatus]],
        *,
        max_connections: int = MAX_CONNECTIONS,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        self._address = parse_address(address)
        self._statuses = statuses
        self._max_connections = max_connections
        self._read_timeout = read_timeout
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        if self._server is None:
            raise RuntimeError("not started")
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._server = _Server(self._address, self._statuses, self._max_connections, self._read_timeout)
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-http", daemon=True)
        self._thread.start()
        _log.info("metrics and health endpoint listening", address=f"{self._address[0]}:{self.port}")

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
