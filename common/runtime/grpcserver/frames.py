"""HTTP/2 frame types, flags, error codes and settings that the server uses (RFC 9113).

Only numbers and the 9-byte frame header live here, so that the connection code reads in terms
of names and tests can build frames the same way.
"""

from __future__ import annotations

import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADER_LEN = 9

# frame types
DATA = 0x0
HEADERS = 0x1
PRIORITY = 0x2
RST_STREAM = 0x3
SETTINGS = 0x4
PUSH_PROMISE = 0x5
PING = 0x6
GOAWAY = 0x7
WINDOW_UPDATE = 0x8
CONTINUATION = 0x9

# flags
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

# error codes
NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
INTERNAL_ERROR = 0x2
FLOW_CONTROL_ERROR = 0x3
STREAM_CLOSED = 0x5
FRAME_SIZE_ERROR = 0x6
REFUSED_STREAM = 0x7
CANCEL = 0x8
COMPRESSION_ERROR = 0x9
ENHANCE_YOUR_CALM = 0xB

# settings identifiers
SETTINGS_HEADER_TABLE_SIZE = 0x1
SETTINGS_ENABLE_PUSH = 0x2
SETTINGS_MAX_CONCURRENT_STREAMS = 0x3
SETTINGS_INITIAL_WINDOW_SIZE = 0x4
SETTINGS_MAX_FRAME_SIZE = 0x5
SETTINGS_MAX_HEADER_LIST_SIZE = 0x6

DEFAULT_WINDOW = 65535
DEFAULT_MAX_FRAME = 16384
MAX_WINDOW = 2**31 - 1

_HEADER = struct.Struct(">HBBBI")


def header(length: int, kind: int, flags: int, stream: int) -> bytes:
    """The 9-byte frame header: 24-bit length, type, flags, 31-bit stream identifier."""
    return _HEADER.pack(length >> 8, length & 0xFF, kind, flags, stream & MAX_WINDOW)


def parse_header(buf: bytes | bytearray | memoryview, at: int = 0) -> tuple[int, int, int, int]:
    """(length, type, flags, stream) of the frame header at `at`; the reserved bit is dropped."""
    high, low, kind, flags, stream = _HEADER.unpack_from(buf, at)
    return (high << 8) | low, kind, flags, stream & MAX_WINDOW


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return header(len(payload), kind, flags, stream) + payload


def settings(values: dict[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in values.items()))


def window_update(stream: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream, struct.pack(">I", increment))


def rst_stream(stream: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream, struct.pack(">I", code))


def goaway(last_stream: int, code: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, struct.pack(">II", last_stream, code) + debug)
