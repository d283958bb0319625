"""The two framings NRI stacks on one unix socket, as pure functions over bytes.

1. The multiplexer: the socket (the "trunk") carries frames `conn id (u32 BE) | length (u32 BE) |
   payload`. Connection 1 carries the plugin's ttrpc server (the runtime calls the plugin),
   connection 2 the runtime's ttrpc server (the plugin calls the runtime). A connection's
   payloads concatenate into one byte stream; frame borders mean nothing to ttrpc.
2. ttrpc: on each connection, messages `length (u32 BE) | stream id (u32 BE) | type (u8) |
   flags (u8) | data`, data at most 4 MiB; type 1 is a request (`ttrpc.Request`), 2 its response
   (`ttrpc.Response`) on the same stream id; a client numbers its streams 1, 3, 5, ...

Frame size when sending: the runtime's Go reader hands each frame to a buffered reader whose
buffer is 4 KiB and fails the whole connection (ENOMEM) when a frame does not fit the space it
reads into. Every ttrpc message is therefore cut into frames of at most 4 KiB, each message
starting a new frame, which always fits.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

PLUGIN_CONN = 1  # the plugin serves, the runtime calls
RUNTIME_CONN = 2  # the runtime serves, the plugin calls

MUX_HEADER = struct.Struct(">II")
TTRPC_HEADER = struct.Struct(">IIBB")
MAX_MESSAGE = 4 << 20  # ttrpc's limit on one message's data
MAX_FRAME = 4096  # what we send per mux frame (module doc)
MAX_INCOMING_FRAME = TTRPC_HEADER.size + MAX_MESSAGE  # the most a peer may send in one frame

REQUEST = 1
RESPONSE = 2
DATA = 3


class ProtocolError(Exception):
    """The peer broke the framing; the connection cannot be trusted any more."""


@dataclass(frozen=True, slots=True)
class Message:
    stream_id: int
    type: int
    flags: int
    data: bytes


def encode_message(stream_id: int, type_: int, data: bytes, flags: int = 0) -> bytes:
    if len(data) > MAX_MESSAGE:
        raise ProtocolError(f"ttrpc message of {len(data)} bytes exceeds the {MAX_MESSAGE}-byte limit")
    return TTRPC_HEADER.pack(len(data), stream_id, type_, flags) + data


def frames(conn_id: int, message: bytes, limit: int = MAX_FRAME) -> Iterator[bytes]:
    """Mux frames carrying `message` on `conn_id`, each payload at most `limit` bytes."""
    for start in range(0, max(len(message), 1), limit):
        chunk = message[start : start + limit]
        yield MUX_HEADER.pack(conn_id, len(chunk)) + chunk


class Demux:
    """Feed it trunk bytes as they arrive; it yields `(conn id, ttrpc message)` once complete.

    Bounded: a frame or message larger than the protocol allows is a ProtocolError before any
    memory is set aside for it.
    """

    def __init__(self) -> None:
        self._trunk = bytearray()
        self._streams: dict[int, bytearray] = {}

    def feed(self, data: bytes) -> list[tuple[int, Message]]:
        self._trunk += data
        out: list[tuple[int, Message]] = []
        while len(self._trunk) >= MUX_HEADER.size:
            conn_id, length = MUX_HEADER.unpack_from(self._trunk)
            if length > MAX_INCOMING_FRAME:
                raise ProtocolError(f"mux frame of {length} bytes on connection {conn_id} is too large")
            end = MUX_HEADER.size + length
            if len(self._trunk) < end:
                break
            payload = bytes(self._trunk[MUX_HEADER.size : end])
            del self._trunk[:end]
            if conn_id not in (PLUGIN_CONN, RUNTIME_CONN):
                continue  # a connection nobody opened: the Go side drops it too
            stream = self._streams.setdefault(conn_id, bytearray())
            stream += payload
            out.extend((conn_id, m) for m in _messages(stream))
        return out


def _messages(stream: bytearray) -> Iterator[Message]:
    while len(stream) >= TTRPC_HEADER.size:
        length, stream_id, type_, flags = TTRPC_HEADER.unpack_from(stream)
        if length > MAX_MESSAGE:
            raise ProtocolError(f"ttrpc message of {length} bytes exceeds the {MAX_MESSAGE}-byte limit")
        end = TTRPC_HEADER.size + length
        if len(stream) < end:
            return
        data = bytes(stream[TTRPC_HEADER.size : end])
        del stream[:end]
        yield Message(stream_id, type_, flags, data)
