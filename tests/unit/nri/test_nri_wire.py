"""The mux and ttrpc framing (common/nri/wire.py): what goes out is cut as the runtime's reader
needs it, what comes in is reassembled however the bytes arrive, and oversize is refused before
memory is set aside for it."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from topodra.common.nri import wire


def test_a_message_is_cut_into_frames_of_at_most_4_kib() -> None:
    message = wire.encode_message(7, wire.REQUEST, b"x" * 10_000)
    out = list(wire.frames(wire.RUNTIME_CONN, message))
    assert [len(f) - 8 for f in out] == [4096, 4096, 10_010 - 8192]
    for f in out:
        conn_id, length = struct.unpack(">II", f[:8])
        assert conn_id == wire.RUNTIME_CONN and length == len(f) - 8
    assert b"".join(f[8:] for f in out) == message
    header = struct.unpack(">IIBB", message[:10])
    assert header == (10_000, 7, wire.REQUEST, 0)


def test_an_empty_message_still_gets_its_frame() -> None:
    message = wire.encode_message(1, wire.RESPONSE, b"")
    (frame,) = wire.frames(wire.PLUGIN_CONN, message)
    assert frame == struct.pack(">II", wire.PLUGIN_CONN, 10) + struct.pack(">IIBB", 0, 1, wire.RESPONSE, 0)


@given(
    payloads=st.lists(st.tuples(st.sampled_from([1, 2]), st.binary(max_size=9000)), min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=1, max_value=5000), max_size=40),
)
def test_demux_reassembles_whatever_the_chunking(payloads: list[tuple[int, bytes]], cuts: list[int]) -> None:
    trunk = b""
    for i, (conn_id, data) in enumerate(payloads):
        trunk += b"".join(
            wire.frames(conn_id, wire.encode_message(2 * i + 1, wire.REQUEST, data), limit=1500)
        )
    demux = wire.Demux()
    got: list[tuple[int, wire.Message]] = []
    pos = 0
    for cut in cuts:
        got += demux.feed(trunk[pos : pos + cut])
        pos += cut
    got += demux.feed(trunk[pos:])
    assert [(c, m.stream_id, m.data) for c, m in got] == [
        (conn_id, 2 * i + 1, data) for i, (conn_id, data) in enumerate(payloads)
    ]


def test_streams_of_two_connections_interleave() -> None:
    a = wire.encode_message(1, wire.REQUEST, b"a" * 5000)
    b = wire.encode_message(3, wire.RESPONSE, b"b" * 10)
    fa = list(wire.frames(1, a))
    fb = list(wire.frames(2, b))
    got = wire.Demux().feed(fa[0] + fb[0] + fa[1])
    assert [(c, m.data[:1], len(m.data)) for c, m in got] == [(2, b"b", 10), (1, b"a", 5000)]


def test_unknown_connections_are_dropped() -> None:
    msg = wire.encode_message(1, wire.REQUEST, b"zz")
    assert wire.Demux().feed(b"".join(wire.frames(9, msg))) == []


def test_oversize_is_refused_before_it_is_buffered() -> None:
    with pytest.raises(wire.ProtocolError, match="too large"):
        wire.Demux().feed(struct.pack(">II", 1, wire.MAX_INCOMING_FRAME + 1))
    with pytest.raises(wire.ProtocolError, match="exceeds"):
        wire.Demux().feed(struct.pack(">II", 1, 10) + struct.pack(">IIBB", wire.MAX_MESSAGE + 1, 1, 1, 0))
    with pytest.raises(wire.ProtocolError, match="exceeds"):
        wire.encode_message(1, wire.REQUEST, b"x" * (wire.MAX_MESSAGE + 1))
