"""One unary gRPC call over a unix socket, for the few calls a driver makes to the kubelet.

The drivers serve gRPC with their own HTTP/2 code (grpcserver/), and grpcio is only the tests'
client, so asking the kubelet something reuses that code's frames and HPACK rather than pull in
grpcio for one call a minute. One connection per call, one stream: the preface and our settings
(a 16 MiB window, so the answer never waits for a window update), the request, then frames until
the trailers, answering the peer's SETTINGS and PINGs on the way. Whatever is not that exchange
ends the call with CallError; the caller decides what not knowing means.
"""

from __future__ import annotations

import socket
import struct
import time

from topodra.common.runtime.grpcserver import frames, hpack

ANSWER_LIMIT = 16 << 20  # bytes of answer; also the window we open, so no update is needed
_WINDOW = ANSWER_LIMIT + 4096


class CallError(RuntimeError):
    """The call did not end in a gRPC OK with one message; the text says how it ended."""


def call(path: str, method: str, request: bytes, *, timeout: float, limit: int = ANSWER_LIMIT) -> bytes:
    """The answer message of `method` ("/package.Service/Method") called with the serialized
    `request` on the unix socket at `path`. OSError when the socket cannot be reached."""
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        block = hpack.encode(
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", method),
                (":authority", "localhost"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ]
        )
        s.sendall(
            frames.PREFACE
            + frames.settings({frames.SETTINGS_ENABLE_PUSH: 0, frames.SETTINGS_INITIAL_WINDOW_SIZE: _WINDOW})
            + frames.window_update(0, _WINDOW - frames.DEFAULT_WINDOW)
            + frames.frame(frames.HEADERS, frames.END_HEADERS, 1, block)
            + frames.frame(frames.DATA, frames.END_STREAM, 1, _message(request))
        )
        return _answer(_Reader(s, deadline), method, limit)


def _message(body: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", len(body)) + body


class _Reader:
    def __init__(self, s: socket.socket, deadline: float) -> None:
        self.s = s
        self.deadline = deadline

    def exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise CallError("no answer in time")
            self.s.settimeout(left)
            try:
                chunk = self.s.recv(n - len(out))
            except TimeoutError:
                raise CallError("no answer in time") from None
            if not chunk:
                raise CallError("the peer closed the connection before the answer ended")
            out += chunk
        return bytes(out)


def _unpad(flags: int, payload: bytes, kind: int) -> bytes:
    if flags & frames.PADDED:
        if not payload or payload[0] >= len(payload):
            raise CallError("a frame's padding is longer than the frame")
        payload = payload[1 : len(payload) - payload[0]]
    if kind == frames.HEADERS and flags & frames.PRIORITY_FLAG:
        if len(payload) < 5:
            raise CallError("a HEADERS frame too short for its priority fields")
        payload = payload[5:]
    return payload


def _answer(r: _Reader, method: str, limit: int) -> bytes:
    decoder = hpack.Decoder()
    data = bytearray()
    fields: dict[str, str] = {}
    block = bytearray()
    in_block = False  # a HEADERS frame came without END_HEADERS: only its CONTINUATIONs may follow
    ends = False  # the HEADERS frame of the block being read ended the stream
    while True:
        length, kind, flags, stream = frames.parse_header(r.exactly(frames.HEADER_LEN))
        if length > frames.DEFAULT_MAX_FRAME:
            raise CallError(f"a frame of {length} bytes, above the {frames.DEFAULT_MAX_FRAME} we accept")
        payload = r.exactly(length)
        if in_block and (kind != frames.CONTINUATION or stream != 1):
            raise CallError("a header block was cut off by another frame")
        if kind == frames.SETTINGS and not flags & frames.ACK:
            r.s.sendall(frames.frame(frames.SETTINGS, frames.ACK, 0))
        elif kind == frames.PING and not flags & frames.ACK:
            r.s.sendall(frames.frame(frames.PING, frames.ACK, 0, payload))
        elif kind == frames.GOAWAY:
            code = struct.unpack(">I", payload[4:8])[0] if len(payload) >= 8 else -1
            raise CallError(f"the peer went away (GOAWAY code {code})")
        elif stream != 1:
            continue  # WINDOW_UPDATE and the like for the connection
        elif kind == frames.RST_STREAM:
            code = struct.unpack(">I", payload[:4])[0] if len(payload) >= 4 else -1
            raise CallError(f"the peer reset the call (code {code})")
        elif kind in (frames.HEADERS, frames.CONTINUATION):
            if kind == frames.HEADERS:
                block += _unpad(flags, payload, kind)
                ends = bool(flags & frames.END_STREAM)  # acted on once the block is whole
            elif not in_block:
                raise CallError("a CONTINUATION frame without a header block")
            else:
                block += payload
            if len(block) > 65536:
                raise CallError("the answer's headers are too large")
            in_block = not flags & frames.END_HEADERS
            if not in_block:
                try:
                    fields.update(decoder.decode(bytes(block)))
                except hpack.HpackError as e:
                    raise CallError(f"cannot read the answer's headers: {e}") from e
                block.clear()
                if ends:
                    return _result(fields, bytes(data), method)
        elif kind == frames.DATA:
            data += _unpad(flags, payload, kind)
            if len(data) > limit + 5:
                raise CallError(f"the answer is larger than {limit} bytes")
            if flags & frames.END_STREAM:
                return _result(fields, bytes(data), method)


def _result(fields: dict[str, str], data: bytes, method: str) -> bytes:
    if fields.get(":status") != "200":
        raise CallError(f"{method}: HTTP status {fields.get(':status')!r}")
    status = fields.get("grpc-status")
    if status != "0":
        raise CallError(f"{method}: gRPC status {status!r}: {fields.get('grpc-message', '')[:300]}")
    if len(data) < 5 or data[0] != 0:
        raise CallError(f"{method}: the answer is not one uncompressed message")
    (size,) = struct.unpack(">I", data[1:5])
    if size != len(data) - 5:
        raise CallError(f"{method}: the answer holds {len(data) - 5} bytes, its message says {size}")
    return data[5:]
