"""One client connection of the gRPC server: HTTP/2 framing, streams, flow control, calls.

One thread reads the socket and parses frames; each complete request goes to the server's
worker pool, whose thread runs the handler and writes the answer itself (a unary answer that
fits the send windows leaves in one `sendall`: headers, message and trailers). A thread that
answers many calls at once (the claim core answers a whole batch) does it inside `gathered()`:
its frames for each connection leave together in one `sendall` at the end. One condition
guards the socket's writes, the send windows and the stream table, so a worker waiting for a
WINDOW_UPDATE sleeps on it and the reader wakes it.

Limits (docs/design/kubelet.md: the socket is owner-only and the kubelet is the only client,
but the plugin still bounds what one connection can make it hold): 16 KiB frames, 16 KiB of
header list, 64 KiB per header block, 4 MiB per request message, 128 concurrent streams.
A protocol violation closes the connection with GOAWAY; a bad call gets a gRPC status for that
call only.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError
from topodra.common import logs
from topodra.common.runtime.grpcserver import frames as f
from topodra.common.runtime.grpcserver import hpack

# gRPC status codes
OK = 0
UNKNOWN = 2
RESOURCE_EXHAUSTED = 8
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14

RECV_WINDOW = 1 << 20  # per stream and per connection; replenished once half is used

_gathering = threading.local()  # .frames: connection -> frames this thread holds back, or None


def _held() -> dict[Connection, list[bytes]] | None:
    """What this thread holds back inside `gathered()`; None outside it."""
    frames: dict[Connection, list[bytes]] | None = _gathering.__dict__.get("frames")
    return frames


@contextlib.contextmanager
def gathered() -> Iterator[None]:
    """Within the block, the frames this thread writes wait; at its end each connection's go out
    in one send, in the order they were written. For a thread that answers many calls at once:
    one system call instead of one per answer, and the client wakes once for them all (the
    kubelet's gRPC client also answers each wake-up that brings data with a PING of its own).
    Everything else about a write (stream state, send windows) is done when it is written;
    only the bytes wait. A write that must wait for the client's window sends what this thread
    held back for that connection first. Nested blocks send at the end of the outermost."""
    if _held() is not None:
        yield
        return
    held: dict[Connection, list[bytes]] = {}
    _gathering.frames = held
    try:
        yield
    finally:
        _gathering.frames = None
        for conn, frames in held.items():
            conn._send_held(frames)


MAX_STATUS_MESSAGE = 1024  # grpc-message text we send


@dataclass(frozen=True, slots=True)
class Limits:
    max_concurrent_streams: int = 128
    max_header_list: int = 16384
    max_header_block: int = 65536
    max_message: int = 4 << 20
    # A client that stops reading, or gives no window, for this long loses the call (a window
    # that never opens) or the connection (a write that never ends): answers are written by the
    # thread that serves the claim queue, which must never wait on one client for long.
    send_timeout: float = 10.0


DEFAULT_LIMITS = Limits()
Handler = Callable[[Any, "CallContext"], Any]


@dataclass(frozen=True, slots=True)
class Method:
    """One served method: how its request is parsed, who answers, and whether it streams."""

    parse: Callable[[bytes], Any]
    handler: Handler
    streaming: bool


Submit = Callable[[Callable[..., None], Any, Any], None]

_RESPONSE_HEADERS = hpack.encode([(":status", "200"), ("content-type", "application/grpc")])
_TRAILERS_OK = hpack.encode([("grpc-status", "0")])


def _headers_frame(stream: int) -> bytes:
    return f.header(len(_RESPONSE_HEADERS), f.HEADERS, f.END_HEADERS, stream) + _RESPONSE_HEADERS


def _ok_trailers_frame(stream: int) -> bytes:
    return f.header(len(_TRAILERS_OK), f.HEADERS, f.END_HEADERS | f.END_STREAM, stream) + _TRAILERS_OK


_PREFIX = struct.Struct(">BI")


class Deferred:
    """An answer given later: a unary handler returns one and, from any thread, calls `resolve`
    with the response message (or an exception, which the caller gets as UNKNOWN). The call
    holds no worker meanwhile."""

    __slots__ = ("_lock", "_resolved", "_result", "_then")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._then: Callable[[Any], None] | None = None
        self._result: Any = None
        self._resolved = False

    def resolve(self, result: Any) -> None:
        with self._lock:
            if self._resolved:
                return
            self._resolved = True
            self._result = result
            then = self._then
        if then is not None:
            then(result)

    def then(self, callback: Callable[[Any], None]) -> None:
        with self._lock:
            if not self._resolved:
                self._then = callback
                return
            result = self._result
        callback(result)


class ProtocolError(Exception):
    """A connection error: the connection ends with GOAWAY carrying `code`."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Stream:
    __slots__ = (
        "body",
        "callbacks",
        "client_done",
        "done",
        "id",
        "method",
        "reset",
        "send_window",
        "unacked",
    )

    def __init__(self, stream_id: int, method: Method, send_window: int) -> None:
        self.id = stream_id
        self.method = method
        self.body = bytearray()
        self.client_done = False  # END_STREAM received
        self.reset = False  # RST_STREAM received or connection gone: nothing more is sent
        self.done = False  # our END_STREAM sent
        self.send_window = send_window
        self.unacked = 0
        self.callbacks: list[Callable[[], None]] = []


class CallContext:
    """What a handler may ask of its call (the part of grpc.ServicerContext this project uses)."""

    __slots__ = ("_conn", "_stream")

    def __init__(self, conn: Connection, stream: _Stream) -> None:
        self._conn = conn
        self._stream = stream

    def add_callback(self, callback: Callable[[], None]) -> bool:
        """Run `callback` once the call ends (answered, cancelled, or connection gone).
        False when it has ended already (the callback is not run then)."""
        with self._conn._cond:
            if self._stream.reset or self._stream.done:
                return False
            self._stream.callbacks.append(callback)
            return True


def percent_encode(message: str) -> str:
    """grpc-message is percent-encoded UTF-8; cut to a bounded length first."""
    raw = message.encode("utf-8", "replace")[:MAX_STATUS_MESSAGE]
    return "".join(chr(b) if 0x20 <= b <= 0x7E and b != 0x25 else f"%{b:02X}" for b in raw)


class Connection:
    def __init__(
        self,
        sock: socket.socket,
        routes: dict[str, Method],
        submit: Submit,
        log: logs.Logger,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self._sock = sock
        seconds = int(limits.send_timeout)
        sock.setsockopt(
            socket.SOL_SOCKET,
            socket.SO_SNDTIMEO,
            struct.pack("ll", seconds, int((limits.send_timeout - seconds) * 1_000_000)),
        )
        self._routes = routes
        self._submit = submit
        self._log = log
        self._limits = limits
        self._cond = threading.Condition(threading.Lock())  # never taken twice by one thread
        self._streams: dict[int, _Stream] = {}
        self._last_stream = 0
        self._send_window = f.DEFAULT_WINDOW  # the connection's, for what we send
        self._peer_initial_window = f.DEFAULT_WINDOW
        self._peer_max_frame = f.DEFAULT_MAX_FRAME
        self._recv_unacked = 0
        self._decoder = hpack.Decoder(max_table_size=4096, max_header_list_size=limits.max_header_list)
        self._continuation: tuple[int, int, bytearray] | None = None
        self._closed = False
        self._goaway_sent = False
        self._active = 0  # calls handed to workers and not finished

    # --- lifecycle ----------------------------------------------------------------------------
    def serve(self) -> None:
        """Read and act on frames until the peer goes away or the connection is shut."""
        try:
            with self._cond:
                self._write(
                    f.settings(
                        {
                            f.SETTINGS_ENABLE_PUSH: 0,
                            f.SETTINGS_MAX_CONCURRENT_STREAMS: self._limits.max_concurrent_streams,
                            f.SETTINGS_INITIAL_WINDOW_SIZE: RECV_WINDOW,
                            f.SETTINGS_MAX_HEADER_LIST_SIZE: self._limits.max_header_list,
                        }
                    )
                    + f.window_update(0, RECV_WINDOW - f.DEFAULT_WINDOW)
                )
            self._read_loop()
        except ProtocolError as e:
            self._log.warning("gRPC client broke the HTTP/2 protocol; closing", error=str(e), code=e.code)
            with self._cond:
                self._write(f.goaway(self._last_stream, e.code, str(e).encode()[:256]))
        except OSError as e:
            if not self._closed:
                self._log.debug("gRPC connection failed", error=str(e))
        finally:
            self._close()

    def goaway(self) -> None:
        """No new calls on this connection; those under way finish."""
        with self._cond:
            if not self._goaway_sent:
                self._goaway_sent = True
                self._write(f.goaway(self._last_stream, f.NO_ERROR))

    def wait_idle(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._active == 0 or self._closed, timeout)

    def shutdown(self) -> None:
        with contextlib.suppress(OSError):  # already shut or closed
            self._sock.shutdown(socket.SHUT_RDWR)

    def _close(self) -> None:
        with self._cond:
            self._closed = True
            streams = list(self._streams.values())
            self._streams.clear()
            self._cond.notify_all()
        for s in streams:
            self._end(s, reset=True)
        self._sock.close()

    # --- reading ------------------------------------------------------------------------------
    def _read_loop(self) -> None:
        recv = self._sock.recv
        buf = bytearray()
        while len(buf) < len(f.PREFACE):
            data = recv(65536)
            if not data:
                return
            buf += data
        if bytes(buf[: len(f.PREFACE)]) != f.PREFACE:
            raise ProtocolError(f.PROTOCOL_ERROR, "the connection does not start with the HTTP/2 preface")
        del buf[: len(f.PREFACE)]
        max_frame = f.DEFAULT_MAX_FRAME
        while True:
            at = 0
            n = len(buf)
            while n - at >= f.HEADER_LEN:
                length, kind, flags, stream = f.parse_header(buf, at)
                if length > max_frame:
                    raise ProtocolError(f.FRAME_SIZE_ERROR, f"frame of {length} bytes, above {max_frame}")
                end = at + f.HEADER_LEN + length
                if end > n:
                    break
                self._frame(kind, flags, stream, bytes(buf[at + f.HEADER_LEN : end]))
                at = end
            if at:
                del buf[:at]
            data = recv(65536)
            if not data:
                return
            buf += data

    def _frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if self._continuation is not None and kind != f.CONTINUATION:
            raise ProtocolError(f.PROTOCOL_ERROR, "a header block was interrupted by another frame")
        if kind == f.DATA:
            self._on_data(flags, stream, payload)
        elif kind == f.HEADERS:
            self._on_headers_frame(flags, stream, payload)
        elif kind == f.CONTINUATION:
            self._on_continuation(flags, stream, payload)
        elif kind == f.WINDOW_UPDATE:
            self._on_window_update(stream, payload)
        elif kind == f.SETTINGS:
            self._on_settings(flags, stream, payload)
        elif kind == f.PING:
            if len(payload) != 8 or stream:
                raise ProtocolError(f.FRAME_SIZE_ERROR if len(payload) != 8 else f.PROTOCOL_ERROR, "bad PING")
            if not flags & f.ACK:
                with self._cond:
                    self._write(f.frame(f.PING, f.ACK, 0, payload))
        elif kind == f.RST_STREAM:
            if len(payload) != 4 or not stream:
                raise ProtocolError(f.PROTOCOL_ERROR, "bad RST_STREAM")
            with self._cond:
                s = self._streams.pop(stream, None)
            if s is not None:
                self._end(s, reset=True)
            elif stream > self._last_stream:
                raise ProtocolError(f.PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream}")
        elif kind == f.GOAWAY:
            self._log.debug("gRPC client sent GOAWAY")
        elif kind == f.PRIORITY:
            if len(payload) != 5:
                raise ProtocolError(f.FRAME_SIZE_ERROR, "bad PRIORITY")
        elif kind == f.PUSH_PROMISE:
            raise ProtocolError(f.PROTOCOL_ERROR, "a client sent PUSH_PROMISE")
        # other frame types are ignored, as HTTP/2 asks

    def _on_settings(self, flags: int, stream: int, payload: bytes) -> None:
        if stream:
            raise ProtocolError(f.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & f.ACK:
            if payload:
                raise ProtocolError(f.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            return
        if len(payload) % 6:
            raise ProtocolError(f.FRAME_SIZE_ERROR, "SETTINGS length is not a multiple of 6")
        with self._cond:
            for at in range(0, len(payload), 6):
                ident, value = struct.unpack_from(">HI", payload, at)
                if ident == f.SETTINGS_INITIAL_WINDOW_SIZE:
                    if value > f.MAX_WINDOW:
                        raise ProtocolError(f.FLOW_CONTROL_ERROR, "initial window above 2^31-1")
                    delta = value - self._peer_initial_window
                    self._peer_initial_window = value
                    for s in self._streams.values():
                        s.send_window += delta
                elif ident == f.SETTINGS_MAX_FRAME_SIZE:
                    if not f.DEFAULT_MAX_FRAME <= value <= (1 << 24) - 1:
                        raise ProtocolError(f.PROTOCOL_ERROR, f"max frame size {value} out of range")
                    self._peer_max_frame = value
                elif ident == f.SETTINGS_ENABLE_PUSH and value > 1:
                    raise ProtocolError(f.PROTOCOL_ERROR, "ENABLE_PUSH is neither 0 nor 1")
            self._write(f.frame(f.SETTINGS, f.ACK, 0))
            self._cond.notify_all()

    def _on_window_update(self, stream: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ProtocolError(f.FRAME_SIZE_ERROR, "bad WINDOW_UPDATE")
        increment = int.from_bytes(payload) & f.MAX_WINDOW
        with self._cond:
            if stream == 0:
                if increment == 0:
                    raise ProtocolError(f.PROTOCOL_ERROR, "WINDOW_UPDATE of 0 for the connection")
                self._send_window += increment
                if self._send_window > f.MAX_WINDOW:
                    raise ProtocolError(f.FLOW_CONTROL_ERROR, "connection window above 2^31-1")
            else:
                s = self._streams.get(stream)
                if s is None:
                    return
                if increment == 0 or s.send_window + increment > f.MAX_WINDOW:
                    self._streams.pop(stream, None)
                    self._write(f.rst_stream(stream, f.FLOW_CONTROL_ERROR if increment else f.PROTOCOL_ERROR))
                    s.reset = True
                else:
                    s.send_window += increment
            self._cond.notify_all()

    def _on_headers_frame(self, flags: int, stream: int, payload: bytes) -> None:
        if not stream:
            raise ProtocolError(f.PROTOCOL_ERROR, "HEADERS on stream 0")
        block = _unpad(flags, payload)
        if flags & f.PRIORITY_FLAG:
            if len(block) < 5:
                raise ProtocolError(f.FRAME_SIZE_ERROR, "HEADERS too short for its priority")
            block = block[5:]
        if flags & f.END_HEADERS:
            self._on_headers(flags, stream, block)
        else:
            self._continuation = (stream, flags, bytearray(block))

    def _on_continuation(self, flags: int, stream: int, payload: bytes) -> None:
        if self._continuation is None or self._continuation[0] != stream:
            raise ProtocolError(f.PROTOCOL_ERROR, "CONTINUATION without its HEADERS")
        fragments = self._continuation[2]
        fragments += payload
        if len(fragments) > self._limits.max_header_block:
            raise ProtocolError(
                f.ENHANCE_YOUR_CALM, f"header block above {self._limits.max_header_block} bytes"
            )
        if flags & f.END_HEADERS:
            opening = self._continuation[1]
            self._continuation = None
            self._on_headers(opening, stream, bytes(fragments))

    def _on_headers(self, flags: int, stream: int, block: bytes) -> None:
        try:
            # Every block is decoded, refused streams' too: the table is shared by the connection.
            headers = self._decoder.decode(block)
        except hpack.HpackError as e:
            raise ProtocolError(f.COMPRESSION_ERROR, f"header block: {e}") from None
        client_done = bool(flags & f.END_STREAM)
        existing = self._streams.get(stream)
        if existing is not None:  # trailers from the client: they must end its side
            if existing.client_done:
                raise ProtocolError(f.STREAM_CLOSED, f"header block on stream {stream} after its end")
            if not client_done:
                raise ProtocolError(
                    f.PROTOCOL_ERROR, f"second header block on stream {stream} without END_STREAM"
                )
            self._request_complete(existing)
            return
        if stream % 2 == 0 or stream <= self._last_stream:
            raise ProtocolError(f.PROTOCOL_ERROR, f"stream {stream} cannot be opened by the client")
        self._last_stream = stream
        if self._goaway_sent or len(self._streams) >= self._limits.max_concurrent_streams:
            with self._cond:
                self._write(f.rst_stream(stream, f.REFUSED_STREAM))
            return
        method_name = path = content_type = ""
        for name, value in headers:
            if name == ":path":
                path = value
            elif name == ":method":
                method_name = value
            elif name == "content-type":
                content_type = value
        if method_name != "POST":
            self._http_error(stream, "405", client_done)
            return
        if not content_type.startswith("application/grpc"):
            self._http_error(stream, "415", client_done)
            return
        method = self._routes.get(path)
        if method is None:
            self._status_only(stream, UNIMPLEMENTED, f"unknown method {path[:200]}", client_done)
            return
        s = _Stream(stream, method, self._peer_initial_window)
        with self._cond:
            self._streams[stream] = s
        if client_done:
            self._request_complete(s)

    def _on_data(self, flags: int, stream: int, payload: bytes) -> None:
        if not stream:
            raise ProtocolError(f.PROTOCOL_ERROR, "DATA on stream 0")
        size = len(payload)
        self._recv_unacked += size
        if self._recv_unacked >= RECV_WINDOW // 2:
            with self._cond:
                self._write(f.window_update(0, self._recv_unacked))
            self._recv_unacked = 0
        s = self._streams.get(stream)
        if s is None or s.client_done:
            if stream > self._last_stream:
                raise ProtocolError(f.PROTOCOL_ERROR, f"DATA on idle stream {stream}")
            return  # a stream refused, answered early or reset: its data is dropped
        data = _unpad(flags, payload)
        s.body += data
        if len(s.body) > self._limits.max_message + 5:
            with self._cond:
                self._streams.pop(stream, None)
            s.client_done = True
            self._status_only(
                stream, RESOURCE_EXHAUSTED, f"request message above {self._limits.max_message} bytes", False
            )
            return
        if flags & f.END_STREAM:
            self._request_complete(s)
            return
        s.unacked += size
        if s.unacked >= RECV_WINDOW // 2:
            with self._cond:
                self._write(f.window_update(stream, s.unacked))
            s.unacked = 0

    def _request_complete(self, s: _Stream) -> None:
        s.client_done = True
        body = bytes(s.body)
        s.body = bytearray()
        with self._cond:
            self._active += 1
        try:
            self._submit(self._call, s, body)
        except RuntimeError:  # the pool is shut: the server is stopping
            with self._cond:
                self._active -= 1
                self._streams.pop(s.id, None)
            self._status_only(s.id, UNAVAILABLE, "the plugin is stopping", True)

    # --- calls (worker threads) ---------------------------------------------------------------
    def _call(self, s: _Stream, body: bytes) -> None:
        deferred = False
        try:
            request = self._parse(s, body)
            if request is None:
                return
            context = CallContext(self, s)
            if s.method.streaming:
                self._stream_answers(s, s.method.handler(request, context))
                return
            try:
                response = s.method.handler(request, context)
            except Exception as e:
                response = e
            if isinstance(response, Deferred):
                deferred = True
                response.then(lambda result: self._respond(s, result, done=True))
            else:
                self._respond(s, response, done=False)
        finally:
            if not deferred:
                self._done()

    def _respond(self, s: _Stream, response: Any, done: bool) -> None:
        try:
            if isinstance(response, BaseException):
                raise response
            payload = response.SerializeToString()
        except Exception as e:
            self._log.exception("gRPC handler failed", stream=s.id)
            self._fail(s, UNKNOWN, f"{type(e).__name__}: {e}")
        else:
            self._answer(s, payload)
        finally:
            if done:
                self._done()

    def _done(self) -> None:
        with self._cond:
            self._active -= 1
            self._cond.notify_all()

    def _parse(self, s: _Stream, body: bytes) -> Any:
        if len(body) < 5:
            self._fail(s, INTERNAL, "the request carries no message")
            return None
        compressed, length = _PREFIX.unpack_from(body)
        if compressed:
            self._fail(s, UNIMPLEMENTED, "compressed messages are not supported")
            return None
        if length != len(body) - 5:
            self._fail(s, INTERNAL, "the request is not exactly one message")
            return None
        try:
            return s.method.parse(body[5:])
        except DecodeError as e:
            self._fail(s, INTERNAL, f"the request message does not parse: {e}")
            return None

    def _answer(self, s: _Stream, payload: bytes) -> None:
        n = len(payload) + 5
        sid = s.id
        with self._cond:
            if s.reset or self._closed:
                return
            if n <= self._send_window and n <= s.send_window and n <= self._peer_max_frame:
                self._send_window -= n
                s.send_window -= n
                self._write(
                    _headers_frame(sid)
                    + f.header(n, f.DATA, 0, sid)
                    + _PREFIX.pack(0, n - 5)
                    + payload
                    + _ok_trailers_frame(sid)
                )
                self._finish_locked(s)
            else:
                self._write(_headers_frame(sid))
                if not self._data_locked(s, _PREFIX.pack(0, n - 5) + payload):
                    return
                self._write(_ok_trailers_frame(sid))
                self._finish_locked(s)
        self._end(s, reset=False)

    def _stream_answers(self, s: _Stream, answers: Iterator[Any]) -> None:
        sid = s.id
        try:
            with self._cond:
                if s.reset or self._closed:
                    return
                self._write(_headers_frame(sid))
            for answer in answers:
                payload = answer.SerializeToString()
                with self._cond:
                    if not self._data_locked(s, _PREFIX.pack(0, len(payload)) + payload):
                        return
            with self._cond:
                if s.reset or self._closed:
                    return
                self._write(_ok_trailers_frame(sid))
                self._finish_locked(s)
        except Exception as e:
            self._log.exception("gRPC streaming handler failed", stream=sid)
            with self._cond:
                if not (s.reset or self._closed or s.done):
                    self._write(_trailers(sid, UNKNOWN, f"{type(e).__name__}: {e}"))
                    self._finish_locked(s)
        finally:
            close = getattr(answers, "close", None)
            if close is not None:
                close()  # a generator's `finally` runs now, not at garbage collection
            self._end(s, reset=False)

    def _data_locked(self, s: _Stream, data: bytes) -> bool:
        """Send `data` on `s` within both send windows, waiting for WINDOW_UPDATEs as needed."""
        view = memoryview(data)
        at = 0
        deadline = time.monotonic() + self._limits.send_timeout
        while at < len(data):
            while not (s.reset or self._closed) and (self._send_window <= 0 or s.send_window <= 0):
                left = deadline - time.monotonic()
                if left <= 0:
                    self._log.warning(
                        "gRPC client gave no flow-control window in time; call cancelled",
                        stream=s.id,
                        seconds=self._limits.send_timeout,
                    )
                    s.reset = True
                    self._streams.pop(s.id, None)
                    self._write(f.rst_stream(s.id, f.CANCEL))
                    return False
                self._send_held_locked()  # the client grants window for what it has received
                self._cond.wait(left)
            if s.reset or self._closed:
                return False
            k = min(len(data) - at, self._send_window, s.send_window, self._peer_max_frame)
            self._write(f.header(k, f.DATA, 0, s.id) + view[at : at + k])
            self._send_window -= k
            s.send_window -= k
            at += k
        return True

    def _fail(self, s: _Stream, code: int, message: str) -> None:
        with self._cond:
            if s.reset or self._closed or s.done:
                return
            self._write(_trailers(s.id, code, message, with_headers=True))
            self._finish_locked(s)
        self._end(s, reset=False)

    def _finish_locked(self, s: _Stream) -> None:
        s.done = True
        self._streams.pop(s.id, None)
        if not s.client_done:
            self._write(f.rst_stream(s.id, f.NO_ERROR))

    def _end(self, s: _Stream, reset: bool) -> None:
        """The call is over: wake its writer if cancelled and run its callbacks once."""
        with self._cond:
            if reset:
                s.reset = True
                self._cond.notify_all()
            callbacks, s.callbacks = s.callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                self._log.exception("gRPC call callback failed", stream=s.id)

    # --- answers without a call ---------------------------------------------------------------
    def _status_only(self, stream: int, code: int, message: str, client_done: bool) -> None:
        with self._cond:
            self._write(_trailers(stream, code, message, with_headers=True))
            if not client_done:
                self._write(f.rst_stream(stream, f.NO_ERROR))

    def _http_error(self, stream: int, status: str, client_done: bool) -> None:
        block = hpack.encode([(":status", status)])
        with self._cond:
            self._write(f.header(len(block), f.HEADERS, f.END_HEADERS | f.END_STREAM, stream) + block)
            if not client_done:
                self._write(f.rst_stream(stream, f.NO_ERROR))

    def _write(self, data: bytes) -> None:
        """Callers hold the condition. A dead socket ends the connection for every stream.
        Inside `gathered()` the bytes wait for the end of the block."""
        if self._closed:
            return
        held = _held()
        if held is not None:
            frames = held.get(self)
            if frames is None:
                held[self] = [data]
            else:
                frames.append(data)
            return
        self._send(data)

    def _send_held(self, frames: list[bytes]) -> None:
        with self._cond:
            if not self._closed:
                self._send(b"".join(frames))

    def _send_held_locked(self) -> None:
        held = _held()
        frames = held.pop(self, None) if held else None
        if frames and not self._closed:
            self._send(b"".join(frames))

    def _send(self, data: bytes) -> None:
        """Callers hold the condition."""
        try:
            self._sock.sendall(data)
        except OSError as e:
            if isinstance(e, (BrokenPipeError, ConnectionResetError)):
                # the client hung up first (the kubelet restarting; a client that closes once it
                # has its last answer while a frame of ours is on its way): nothing is wrong
                self._log.debug("gRPC client closed the connection before a write", error=str(e))
            else:  # not reading for `send_timeout` (EAGAIN), or the socket failed
                self._log.warning("gRPC connection cannot be written; closing it", error=str(e))
            self._closed = True
            self._cond.notify_all()
            self.shutdown()


def _trailers(stream: int, code: int, message: str, with_headers: bool = False) -> bytes:
    fields = [(":status", "200"), ("content-type", "application/grpc")] if with_headers else []
    fields += [("grpc-status", str(code)), ("grpc-message", percent_encode(message))]
    block = hpack.encode(fields)
    return f.header(len(block), f.HEADERS, f.END_HEADERS | f.END_STREAM, stream) + block


def _unpad(flags: int, payload: bytes) -> bytes:
    if not flags & f.PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise ProtocolError(f.PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1 : len(payload) - payload[0]]
