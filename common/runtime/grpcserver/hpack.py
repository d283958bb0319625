"""HPACK (RFC 7541) header blocks: a full decoder for requests and a stateless encoder for replies.

The decoder keeps the connection's dynamic table, so one Decoder serves one connection and sees
its header blocks in order. Any error leaves that table in an unknown state: the caller must treat
HpackError as a connection error (COMPRESSION_ERROR) and close.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from topodra.common.runtime.grpcserver import huffman

__all__ = ["STATIC_TABLE", "Decoder", "HpackError", "encode"]


class HpackError(ValueError):
    """A header block that cannot be decoded: an HTTP/2 COMPRESSION_ERROR."""


STATIC_TABLE: tuple[tuple[str, str], ...] = (
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
)
"""RFC 7541 Appendix A; entry i of the RFC is STATIC_TABLE[i - 1]."""

_STATIC_LEN = len(STATIC_TABLE)  # 61
_BY_INDEX = (("", ""), *STATIC_TABLE)  # 1-based, as indices arrive on the wire; 0 is refused first
_ENTRY_OVERHEAD = 32  # RFC 7541 section 4.1: per-entry cost on top of the name and value octets
_MAX_INT = 2**31 - 1
_MAX_CONTINUATION = 5  # 7 bits each: enough for _MAX_INT on any prefix, no room for zero padding


def _integer(block: bytes, pos: int, value: int) -> tuple[int, int]:
    """The rest of an integer whose prefix was all ones (value is that prefix's maximum).

    The bounds stop a peer from making us build huge ints or read endless 0x80 bytes.
    """
    shift = 0
    end = len(block)
    for _ in range(_MAX_CONTINUATION):
        if pos >= end:
            raise HpackError("header block ends inside an integer")
        byte = block[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        if value > _MAX_INT:
            raise HpackError("integer in header block exceeds 2**31 - 1")
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise HpackError(f"integer in header block has more than {_MAX_CONTINUATION} continuation bytes")


def _string(block: bytes, pos: int, limit: int) -> tuple[str, int]:
    """A string literal at pos, and the position after it.

    The length is checked against the block and the header list limit before anything is sliced
    or decoded, so a forged length costs nothing.
    """
    if pos >= len(block):
        raise HpackError("header block ends before a string literal")
    first = block[pos]
    length = first & 0x7F
    pos += 1
    if length == 0x7F:
        length, pos = _integer(block, pos, 0x7F)
    end = pos + length
    if end > len(block):
        raise HpackError(f"string literal of {length} octets runs past the end of the header block")
    if length > limit:
        raise HpackError(f"string literal of {length} octets exceeds the header list size limit")
    raw = block[pos:end]
    if first & 0x80:
        try:
            raw = huffman.decode(raw)
        except huffman.HuffmanError as e:
            raise HpackError(str(e)) from None
    # latin-1 maps each octet to one code point, so nothing is lost and len() counts octets.
    return raw.decode("latin-1"), end


class Decoder:
    """Decodes the header blocks of one HTTP/2 connection, in the order they arrive.

    max_table_size is the SETTINGS_HEADER_TABLE_SIZE we advertise (the peer may shrink the table
    below it, never grow it above); max_header_list_size bounds each decoded list, counted as
    RFC 7540 counts SETTINGS_MAX_HEADER_LIST_SIZE.
    """

    def __init__(self, max_table_size: int = 4096, max_header_list_size: int = 65536) -> None:
        self._max_table_size = max_table_size
        self._max_header_list_size = max_header_list_size
        self._capacity = max_table_size  # the peer's current choice, <= _max_table_size
        self._size = 0
        self._entries: deque[tuple[str, str]] = deque()  # newest first: HPACK index 62 is [0]

    @property
    def table(self) -> list[tuple[str, str]]:
        """The dynamic table, newest entry first (index 62 onwards)."""
        return list(self._entries)

    @property
    def table_size(self) -> int:
        """The dynamic table's size as RFC 7541 section 4.1 counts it."""
        return self._size

    def _add(self, name: str, value: str) -> None:
        size = len(name) + len(value) + _ENTRY_OVERHEAD
        entries = self._entries
        # An entry bigger than the whole table empties it and is not added (section 4.4).
        while entries and self._size + size > self._capacity:
            old_name, old_value = entries.pop()
            self._size -= len(old_name) + len(old_value) + _ENTRY_OVERHEAD
        if size <= self._capacity:
            entries.appendleft((name, value))
            self._size += size

    def _resize(self, capacity: int) -> None:
        if capacity > self._max_table_size:
            raise HpackError(
                f"dynamic table size update to {capacity} exceeds the advertised {self._max_table_size}"
            )
        self._capacity = capacity
        entries = self._entries
        while self._size > capacity:
            name, value = entries.pop()
            self._size -= len(name) + len(value) + _ENTRY_OVERHEAD

    def _field(self, index: int) -> tuple[str, str]:
        if index <= _STATIC_LEN:
            if index == 0:
                raise HpackError("header field index 0")
            return _BY_INDEX[index]
        slot = index - _STATIC_LEN - 1
        if slot >= len(self._entries):
            raise HpackError(
                f"header field index {index} is beyond the static table and "
                f"{len(self._entries)} dynamic entries"
            )
        return self._entries[slot]

    def decode(self, block: bytes) -> list[tuple[str, str]]:
        """The header list of one complete header block (HEADERS plus any CONTINUATION)."""
        headers: list[tuple[str, str]] = []
        append = headers.append
        by_index = _BY_INDEX
        entries = self._entries
        limit = self._max_header_list_size
        remaining = limit  # of the header list budget
        end = len(block)
        pos = 0
        while pos < end:
            first = block[pos]
            pos += 1
            if first & 0x80:  # indexed field: the common case once the table is warm
                index = first & 0x7F
                if index == 0x7F:
                    index, pos = _integer(block, pos, 0x7F)
                if 0 < index <= _STATIC_LEN:
                    field = by_index[index]
                elif 0 <= index - _STATIC_LEN - 1 < len(entries):
                    field = entries[index - _STATIC_LEN - 1]
                else:
                    field = self._field(index)  # raises, with the reason
            elif first & 0x20 and not first & 0x40:  # 001xxxxx: dynamic table size update
                if headers:
                    raise HpackError("dynamic table size update after the first header field")
                size = first & 0x1F
                if size == 0x1F:
                    size, pos = _integer(block, pos, 0x1F)
                self._resize(size)
                continue
            else:
                # Literals: 01xxxxxx is added to the table (6-bit name index), 0000xxxx (without
                # indexing) and 0001xxxx (never indexed) are not (4-bit name index). To a
                # decoder that never re-encodes, "never indexed" is the same as "without".
                indexing = first & 0x40
                mask = 0x3F if indexing else 0x0F
                index = first & mask
                if index == mask:
                    index, pos = _integer(block, pos, mask)
                if index:
                    name = self._field(index)[0]
                else:
                    name, pos = _string(block, pos, remaining)
                value, pos = _string(block, pos, remaining)
                field = (name, value)
                if indexing:
                    self._add(name, value)
            remaining -= len(field[0]) + len(field[1]) + _ENTRY_OVERHEAD
            if remaining < 0:
                raise HpackError(f"header list exceeds {limit} octets")
            append(field)
        return headers


_STATIC_FIELDS: dict[tuple[str, str], int] = {}
_STATIC_NAMES: dict[str, int] = {}
for _i, (_name, _value) in enumerate(STATIC_TABLE, start=1):
    _STATIC_FIELDS.setdefault((_name, _value), _i)
    _STATIC_NAMES.setdefault(_name, _i)
del _i, _name, _value


def _put_integer(out: bytearray, flags: int, prefix_max: int, value: int) -> None:
    if value < prefix_max:
        out.append(flags | value)
        return
    out.append(flags | prefix_max)
    value -= prefix_max
    while value >= 0x80:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)


def _put_string(out: bytearray, text: str) -> None:
    raw = text.encode("latin-1")  # the decoder's mapping; other characters raise ValueError
    _put_integer(out, 0x00, 0x7F, len(raw))  # Huffman bit clear: sent raw
    out += raw


def encode(headers: Iterable[tuple[str, str]]) -> bytes:
    """A header block that uses only the static table, so the encoder needs no state.

    Nothing is added to the peer's dynamic table either: fields are indexed when they are in
    the static table and otherwise sent as literals without indexing. Names must already be
    lowercase (HTTP/2); text is sent as latin-1 octets, and a character beyond it raises
    ValueError (UnicodeEncodeError).
    """
    out = bytearray()
    for name, value in headers:
        index = _STATIC_FIELDS.get((name, value))
        if index is not None:
            out.append(0x80 | index)  # 61 at most: fits the 7-bit prefix
            continue
        name_index = _STATIC_NAMES.get(name)
        if name_index is not None:
            _put_integer(out, 0x00, 0x0F, name_index)
        else:
            out.append(0x00)
            _put_string(out, name)
        _put_string(out, value)
    return bytes(out)
