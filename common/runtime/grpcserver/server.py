"""A gRPC server on one unix socket: the listener, its connections and the worker pool.

Why our own and not grpcio's: the kubelet's calls are few, small and unary (plus one health
stream), while `import grpc` alone took 19.6 MiB of resident memory and its server handed each
call between several threads (docs/bench/latest.md). This one hands each call to a worker once;
the worker answers, or, for a handler that returns a `Deferred`, whichever thread resolves it.

    server = GrpcServer("dra.sock", routes, workers=16)
    server.listen(path)     # binds (the caller sets the umask), listens
    server.start()
    ...
    server.stop(grace=5.0)  # no new calls; those under way get `grace` seconds
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from topodra.common import logs
from topodra.common.runtime.grpcserver.connection import DEFAULT_LIMITS, Connection, Limits, Method
from topodra.common.runtime.grpcserver.workers import Workers


class GrpcServer:
    def __init__(
        self, name: str, routes: Mapping[str, Method], workers: int, limits: Limits = DEFAULT_LIMITS
    ) -> None:
        self.name = name
        self._routes = dict(routes)
        self._limits = limits
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self._connections: dict[Connection, threading.Thread] = {}
        self._lock = threading.Lock()
        self._stopping = False
        self._log = logs.get(__name__, socket=name)
        self._pool = Workers(workers, f"grpc-{name}", self._log)

    def listen(self, path: Path) -> None:
        """Bind `path` (up to the 108 bytes the kubelet dials) and listen."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            _bind(sock, path)
            sock.listen(64)
        except BaseException:
            sock.close()
            raise
        self._listener = sock

    def start(self) -> None:
        if self._listener is None:
            raise RuntimeError("listen() first")
        self._accepting = threading.Thread(target=self._accept, name=f"grpc-accept-{self.name}", daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        listener = self._listener
        assert listener is not None
        while True:
            try:
                sock, _ = listener.accept()
            except OSError as e:
                if self._stopping:
                    return
                self._log.warning("accept failed", error=str(e))
                time.sleep(0.1)  # e.g. out of file descriptors: do not spin
                continue
            try:
                conn = Connection(sock, self._routes, self._submit, self._log, self._limits)
            except OSError as e:  # e.g. the client hung up at once: that connection only
                self._log.warning("could not set up a gRPC connection", error=str(e))
                sock.close()
                continue
            thread = threading.Thread(
                target=self._serve, args=(conn,), name=f"grpc-conn-{self.name}", daemon=True
            )
            with self._lock:
                if self._stopping:
                    sock.close()
                    return
                self._connections[conn] = thread
            thread.start()

    def _serve(self, conn: Connection) -> None:
        try:
            conn.serve()
        finally:
            with self._lock:
                self._connections.pop(conn, None)

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        self._pool.submit(fn, *args)

    def stop(self, grace: float) -> None:
        """Stop accepting, let calls under way finish within `grace` seconds, then close all."""
        with self._lock:
            self._stopping = True
            connections = dict(self._connections)
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
            self._listener.close()
        if self._accepting is not None:
            self._accepting.join()
        deadline = time.monotonic() + grace
        for conn in connections:
            conn.goaway()
        for conn in connections:
            conn.wait_idle(max(0.0, deadline - time.monotonic()))
        for conn in connections:
            conn.shutdown()
        for thread in connections.values():
            thread.join(timeout=max(0.1, deadline - time.monotonic()))
        self._pool.close()


def _bind(sock: socket.socket, path: Path) -> None:
    """Python binds at most 107 bytes (it keeps room for a NUL), the kubelet dials 108: a path
    that long is bound through the folder's descriptor in /proc, which names the same folder."""
    raw = os.fsencode(path)
    if len(raw) < 108:
        sock.bind(raw)
        return
    folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        sock.bind(os.fsencode(f"/proc/self/fd/{folder}/") + os.fsencode(path.name))
    finally:
        os.close(folder)
