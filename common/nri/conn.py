"""One NRI connection: a unix socket carrying a ttrpc server and a ttrpc client (wire.py).

The reader thread demultiplexes everything that arrives. Requests from the runtime go to one
worker thread, in arrival order (the runtime sends them one at a time anyway), so a handler may
take its time without stalling the reader; responses to our own calls wake the caller waiting
in `call`. Whoever loses the socket first (EOF, a framing error, `close`) ends every pending
call with ConnectionError and sets `closed`.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage
from topodra.common import logs
from topodra.common.nri import wire
from topodra.proto.ttrpc import request_pb2 as ttrpc_pb

# gRPC status codes used on the wire (google.rpc.Code)
OK = 0
DEADLINE_EXCEEDED = 4
UNIMPLEMENTED = 12
INTERNAL = 13

RECV_SIZE = 65536

M = TypeVar("M", bound=ProtoMessage)

Serve = Callable[[str, str, bytes], bytes]  # (service, method, request bytes) -> response bytes


class RpcError(Exception):
    """A ttrpc call answered with an error status (or a handler refusing a call)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{message} (code {code})")
        self.code = code
        self.message = message


@dataclass(slots=True)
class _Pending:
    done: threading.Event = field(default_factory=threading.Event)
    data: bytes | None = None
    error: BaseException | None = None


class Connection:
    def __init__(self, sock: socket.socket, serve: Serve, name: str = "nri") -> None:
        self._sock = sock
        self._serve = serve
        self._name = name
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._stream_ids = itertools.count(1, 2)
        self._requests: queue.SimpleQueue[wire.Message | None] = queue.SimpleQueue()
        self.closed = threading.Event()
        self.close_reason = ""
        self._log = logs.get("topodra.common.nri", plugin=name)
        self._threads = [
            threading.Thread(target=self._read_loop, name=f"{name}-read", daemon=True),
            threading.Thread(target=self._serve_loop, name=f"{name}-serve", daemon=True),
        ]

    @classmethod
    def dial(cls, path: str, serve: Serve, name: str = "nri", timeout: float = 5.0) -> Connection:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.settimeout(None)
        except BaseException:
            sock.close()
            raise
        return cls(sock, serve, name)

    def start(self) -> None:
        for t in self._threads:
            t.start()

    # --- client side --------------------------------------------------------------------------

    def call(
        self, service: str, method: str, request: ProtoMessage, response_type: type[M], timeout: float
    ) -> M:
        """A unary call to the runtime; RpcError for an error status, ConnectionError when the
        connection ends first, TimeoutError after `timeout` seconds."""
        envelope = ttrpc_pb.Request(
            service=service,
            method=method,
            payload=request.SerializeToString(),
            timeout_nano=int(timeout * 1e9),
        )
        pending = _Pending()
        with self._lock:
            if self.closed.is_set():
                raise ConnectionError(f"NRI connection closed: {self.close_reason}")
            stream_id = next(self._stream_ids)
            self._pending[stream_id] = pending
        try:
            self._send(wire.RUNTIME_CONN, stream_id, wire.REQUEST, envelope.SerializeToString())
            if not pending.done.wait(timeout):
                raise TimeoutError(f"{service}/{method}: no answer within {timeout:g} s")
        finally:
            with self._lock:
                self._pending.pop(stream_id, None)
        if pending.error is not None:
            raise pending.error
        reply = ttrpc_pb.Response()
        try:
            reply.ParseFromString(pending.data or b"")
            if reply.status.code != OK:
                raise RpcError(reply.status.code, reply.status.message)
            answer = response_type()
            answer.ParseFromString(reply.payload)
        except DecodeError as e:
            raise RpcError(INTERNAL, f"{service}/{method}: undecodable answer: {e}") from e
        return answer

    # --- plumbing -----------------------------------------------------------------------------

    def _send(self, conn_id: int, stream_id: int, type_: int, data: bytes) -> None:
        message = wire.encode_message(stream_id, type_, data)
        with self._write_lock:
            try:
                for frame in wire.frames(conn_id, message):
                    self._sock.sendall(frame)
            except OSError as e:
                self._close(f"write failed: {e}")
                raise ConnectionError(f"NRI connection: write failed: {e}") from e

    def _read_loop(self) -> None:
        demux = wire.Demux()
        reason = "closed by the runtime"
        try:
            while True:
                data = self._sock.recv(RECV_SIZE)
                if not data:
                    break
                for conn_id, message in demux.feed(data):
                    self._route(conn_id, message)
        except wire.ProtocolError as e:
            reason = f"protocol error: {e}"
        except OSError as e:
            reason = f"read failed: {e}"
        self._close(reason)

    def _route(self, conn_id: int, message: wire.Message) -> None:
        if conn_id == wire.PLUGIN_CONN and message.type == wire.REQUEST:
            self._requests.put(message)
        elif conn_id == wire.RUNTIME_CONN and message.type == wire.RESPONSE:
            with self._lock:
                pending = self._pending.get(message.stream_id)
            if pending is not None:
                pending.data = message.data
                pending.done.set()
        # anything else (stream data: NRI has no streaming methods) is ignored

    def _serve_loop(self) -> None:
        while True:
            message = self._requests.get()
            if message is None:
                return
            self._answer(message)

    def _answer(self, message: wire.Message) -> None:
        status = ttrpc_pb.Status(code=OK)
        payload = b""
        request = ttrpc_pb.Request()
        try:
            request.ParseFromString(message.data)
            payload = self._serve(request.service, request.method, request.payload)
        except RpcError as e:
            status = ttrpc_pb.Status(code=e.code, message=e.message)
        except DecodeError as e:
            status = ttrpc_pb.Status(code=INTERNAL, message=f"undecodable request: {e}")
        except Exception as e:  # a handler bug must not kill the connection
            self._log.exception(f"NRI handler {request.service}/{request.method} failed")
            status = ttrpc_pb.Status(code=INTERNAL, message=f"{type(e).__name__}: {e}")
        reply = ttrpc_pb.Response(status=status, payload=payload)
        with contextlib.suppress(ConnectionError):
            self._send(wire.PLUGIN_CONN, message.stream_id, wire.RESPONSE, reply.SerializeToString())

    def _close(self, reason: str) -> None:
        with self._lock:
            if self.closed.is_set():
                return
            self.close_reason = reason
            self.closed.set()
            pending = list(self._pending.values())
        for p in pending:
            p.error = ConnectionError(f"NRI connection closed: {reason}")
            p.done.set()
        self._requests.put(None)
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    def close(self, reason: str = "closed by the plugin") -> None:
        self._close(reason)

    def join(self, timeout: float | None = None) -> None:
        for t in self._threads:
            if t is not threading.current_thread() and t.is_alive():
                t.join(timeout)

    def describe(self) -> dict[str, Any]:
        return {"closed": self.closed.is_set(), "reason": self.close_reason}
