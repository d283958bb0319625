"""HTTP on `--metrics-address`: Prometheus metrics, liveness and readiness.

- `/metrics`: prometheus-client's default registry (runtime metrics plus process metrics).
- `/healthz` (liveness): 200 while every plugin's gRPC servers are up; restarting the pod is
  the cure when they are not.
- `/readyz` (readiness): 200 once the kubelet also confirmed registration of every driver;
  503 otherwise, with the per-driver reason, e.g. the kubelet's rejection message.
Both health bodies are JSON with one entry per driver.
"""

from __future__ import annotations

import json
import threading
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], statuses: Callable[[], Sequence[PluginStatus]]) -> None:
        if ":" in address[0]:
            import socket

            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)
        self.statuses = statuses


class _Handler(BaseHTTPRequestHandler):
    server: _Server

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
    def __init__(self, address: str, statuses: Callable[[], Sequence[PluginStatus]]) -> None:
        self._address = parse_address(address)
        self._statuses = statuses
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        if self._server is None:
            raise RuntimeError("not started")
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._server = _Server(self._address, self._statuses)
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-http", daemon=True)
        self._thread.start()
        _log.info("metrics and health endpoint listening", address=f"{self._address[0]}:{self.port}")

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
