"""HPACK (common/runtime/grpcserver/hpack.py, huffman.py): the RFC 7541 Appendix C examples decode
to the RFC's lists and tables, every malformed block is an HpackError and nothing else, and what
the stateless encoder writes decodes back without touching the peer's table."""

from __future__ import annotations

import itertools
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from topodra.common.runtime.grpcserver import huffman
from topodra.common.runtime.grpcserver.hpack import STATIC_TABLE, Decoder, HpackError, encode

Fields = list[tuple[str, str]]


def _huffman_encode(data: bytes) -> bytes:
    """The test's own encoder: the codes end to end, padded with ones to a whole octet."""
    acc = 0
    nbits = 0
    for sym in data:
        code, length = huffman.CODES[sym]
        acc = acc << length | code
        nbits += length
    pad = -nbits % 8
    acc = acc << pad | ((1 << pad) - 1)
    return acc.to_bytes((nbits + pad) // 8, "big")


def _huffman_reference(data: bytes) -> bytes | None:
    """A bit-at-a-time decoder to hold the table-driven one against; None where it must fail."""
    by_code = {code: sym for sym, code in enumerate(huffman.CODES)}
    out = bytearray()
    acc = 0
    nbits = 0
    for byte in data:
        for i in range(7, -1, -1):
            acc = acc << 1 | (byte >> i) & 1
            nbits += 1
            sym = by_code.get((acc, nbits))
            if sym is not None:
                if sym == huffman.EOS:
                    return None
                out.append(sym)
                acc = nbits = 0
    if nbits > 7 or acc != (1 << nbits) - 1:
        return None
    return bytes(out)


# --- the Huffman code ---------------------------------------------------------------------------


def test_huffman_codes_match_rfc_7541_appendix_b_samples() -> None:
    # Spot values read off the RFC's table, independent of how the module derives its codes.
    assert huffman.CODES[0] == (0x1FF8, 13)
    assert huffman.CODES[ord("\n")] == (0x3FFFFFFC, 30)
    assert huffman.CODES[ord(" ")] == (0x14, 6)
    assert huffman.CODES[ord("0")] == (0x0, 5)
    assert huffman.CODES[ord("a")] == (0x3, 5)
    assert huffman.CODES[ord("\\")] == (0x7FFF0, 19)
    assert huffman.CODES[127] == (0xFFFFFFC, 28)
    assert huffman.CODES[255] == (0x3FFFFEE, 26)
    assert huffman.CODES[huffman.EOS] == (0x3FFFFFFF, 30)


def test_huffman_code_is_a_complete_prefix_code() -> None:
    assert len(huffman.CODES) == 257
    # Kraft: the code lengths fill the binary tree exactly, no gaps and no overlap...
    assert sum(2 ** (30 - length) for _, length in huffman.CODES) == 2**30
    # ...and no code is a prefix of another.
    spans = sorted((code << (30 - length), (code + 1) << (30 - length)) for code, length in huffman.CODES)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))


@pytest.mark.parametrize("sym", range(256))
def test_huffman_decodes_every_single_symbol(sym: int) -> None:
    assert huffman.decode(_huffman_encode(bytes([sym]))) == bytes([sym])
    assert huffman.decode(_huffman_encode(bytes([sym, sym, 0x61]))) == bytes([sym, sym, 0x61])


def test_huffman_rfc_examples() -> None:
    assert huffman.decode(bytes.fromhex("f1e3c2e5f23a6ba0ab90f4ff")) == b"www.example.com"
    assert huffman.decode(bytes.fromhex("a8eb10649cbf")) == b"no-cache"
    assert huffman.decode(b"") == b""


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\xff", "more than 7 bits of padding"),  # 8 ones of padding
        (_huffman_encode(b"a") + b"\xff", "more than 7 bits of padding"),
        (bytes([0b00011_000]), "not a prefix of EOS"),  # "a" then 000
        (bytes([0b00011_110]), "not a prefix of EOS"),
        ((0x3FFFFFFF << 2 | 0b11).to_bytes(4, "big"), "contains EOS"),
        ((0x3 << 35 | 0x3FFFFFFF << 5 | 0b11111).to_bytes(5, "big"), "contains EOS"),
        (b"\xff" * 70, "contains EOS"),  # EOS found in the first chunk, not just at the end
    ],
)
def test_huffman_rejects(data: bytes, match: str) -> None:
    assert _huffman_reference(data) is None
    with pytest.raises(huffman.HuffmanError, match=match):
        huffman.decode(data)


@given(st.binary(max_size=200))
def test_huffman_round_trips(data: bytes) -> None:
    assert huffman.decode(_huffman_encode(data)) == data


@given(st.binary(max_size=160))
def test_huffman_agrees_with_bit_at_a_time_decoding(data: bytes) -> None:
    _agrees_with_reference(data)


@given(st.binary(min_size=100, max_size=400), st.integers(min_value=0, max_value=399))
def test_huffman_chunks_do_not_change_the_result(data: bytes, cut: int) -> None:
    # Long strings are read in pieces: a code across a piece boundary, EOS or bad padding
    # anywhere must come out the same as in one piece.
    encoded = _huffman_encode(data)
    assert huffman.decode(encoded) == data
    _agrees_with_reference(
        encoded[: cut % len(encoded)] + b"\xff\xff\xff\xff" + encoded[cut % len(encoded) :]
    )


def _agrees_with_reference(data: bytes) -> None:
    expected = _huffman_reference(data)
    if expected is None:
        with pytest.raises(huffman.HuffmanError):
            huffman.decode(data)
    else:
        assert huffman.decode(data) == expected


# --- RFC 7541 Appendix C --------------------------------------------------------------------------


def _hex(text: str) -> bytes:
    return bytes.fromhex("".join(text.split()))


@pytest.mark.parametrize(
    ("block", "fields", "table"),
    [
        (  # C.2.1 literal with incremental indexing, new name
            "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
            [("custom-key", "custom-header")],
            [("custom-key", "custom-header")],
        ),
        ("040c 2f73 616d 706c 652f 7061 7468", [(":path", "/sample/path")], []),  # C.2.2 without
        ("1008 7061 7373 776f 7264 0673 6563 7265 74", [("password", "secret")], []),  # C.2.3 never
        ("82", [(":method", "GET")], []),  # C.2.4 indexed
    ],
    ids=["C.2.1", "C.2.2", "C.2.3", "C.2.4"],
)
def test_rfc_c2_single_fields(block: str, fields: Fields, table: Fields) -> None:
    decoder = Decoder()
    assert decoder.decode(_hex(block)) == fields
    assert decoder.table == table
    assert decoder.table_size == sum(len(n) + len(v) + 32 for n, v in table)


_REQ1 = [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")]
_REQ2 = [*_REQ1, ("cache-control", "no-cache")]
_REQ3 = [
    (":method", "GET"),
    (":scheme", "https"),
    (":path", "/index.html"),
    (":authority", "www.example.com"),
    ("custom-key", "custom-value"),
]
_REQ_TABLES = [
    [(":authority", "www.example.com")],
    [("cache-control", "no-cache"), (":authority", "www.example.com")],
    [("custom-key", "custom-value"), ("cache-control", "no-cache"), (":authority", "www.example.com")],
]
_REQUEST_SERIES = {
    "C.3": [
        "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        "8286 84be 5808 6e6f 2d63 6163 6865",
        "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ],
    "C.4": [
        "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        "8286 84be 5886 a8eb 1064 9cbf",
        "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ],
}


@pytest.mark.parametrize("series", ["C.3", "C.4"])
def test_rfc_request_series_on_one_decoder(series: str) -> None:
    decoder = Decoder()
    for block, fields, table, size in zip(
        _REQUEST_SERIES[series], [_REQ1, _REQ2, _REQ3], _REQ_TABLES, [57, 110, 164], strict=True
    ):
        assert decoder.decode(_hex(block)) == fields
        assert decoder.table == table
        assert decoder.table_size == size


_DATE1 = ("date", "Mon, 21 Oct 2013 20:13:21 GMT")
_DATE2 = ("date", "Mon, 21 Oct 2013 20:13:22 GMT")
_LOCATION = ("location", "https://www.example.com")
_COOKIE = ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1")
_RESP_FIELDS = [
    [(":status", "302"), ("cache-control", "private"), _DATE1, _LOCATION],
    [(":status", "307"), ("cache-control", "private"), _DATE1, _LOCATION],
    [
        (":status", "200"),
        ("cache-control", "private"),
        _DATE2,
        _LOCATION,
        ("content-encoding", "gzip"),
        _COOKIE,
    ],
]
_RESP_TABLES = [
    [_LOCATION, _DATE1, ("cache-control", "private"), (":status", "302")],
    [(":status", "307"), _LOCATION, _DATE1, ("cache-control", "private")],
    [_COOKIE, ("content-encoding", "gzip"), _DATE2],
]
_RESPONSE_SERIES = {
    "C.5": [
        """4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
        2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
        6c65 2e63 6f6d""",
        "4803 3330 37c1 c0bf",
        """88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
        54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
        5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
        3d31""",
    ],
    "C.6": [
        """4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
        2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3""",
        "4883 640e ffc1 c0bf",
        """88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
        77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
        9587 3160 65c0 03ed 4ee5 b106 3d50 07""",
    ],
}


@pytest.mark.parametrize("series", ["C.5", "C.6"])
def test_rfc_response_series_with_a_256_octet_table(series: str) -> None:
    decoder = Decoder(max_table_size=256)
    for block, fields, table, size in zip(
        _RESPONSE_SERIES[series], _RESP_FIELDS, _RESP_TABLES, [222, 222, 215], strict=True
    ):
        assert decoder.decode(_hex(block)) == fields
        assert decoder.table == table
        assert decoder.table_size == size


# --- the dynamic table ----------------------------------------------------------------------------


def _literal_indexed_new_name(name: str, value: str) -> bytes:
    assert len(name) < 127 and len(value) < 127
    return bytes([0x40, len(name)]) + name.encode() + bytes([len(value)]) + value.encode()


def test_an_entry_larger_than_the_table_empties_it() -> None:
    decoder = Decoder(max_table_size=100)
    decoder.decode(_literal_indexed_new_name("a", "b"))
    assert decoder.table_size == 34
    # 1 + 68 + 32 = 101 > 100: the field is still decoded, but the table ends up empty.
    assert decoder.decode(_literal_indexed_new_name("c", "d" * 68)) == [("c", "d" * 68)]
    assert decoder.table == [] and decoder.table_size == 0


def test_eviction_drops_the_oldest_entries_first() -> None:
    decoder = Decoder(max_table_size=100)
    decoder.decode(_literal_indexed_new_name("a", "1") + _literal_indexed_new_name("b", "2"))
    assert decoder.table == [("b", "2"), ("a", "1")]
    decoder.decode(_literal_indexed_new_name("c", "3"))  # 3 x 34 > 100
    assert decoder.table == [("c", "3"), ("b", "2")]
    assert decoder.decode(b"\xbe\xbf") == [("c", "3"), ("b", "2")]  # 62 is the newest


def test_size_update_shrinks_the_table_and_caps_later_entries() -> None:
    decoder = Decoder()
    decoder.decode(_literal_indexed_new_name("a", "1") + _literal_indexed_new_name("b", "2"))
    assert decoder.decode(b"\x3f\x04" + b"\x82") == [(":method", "GET")]  # size 31 + 4 = 35
    assert decoder.table == [("b", "2")] and decoder.table_size == 34
    decoder.decode(b"\x20" + _literal_indexed_new_name("c", "3"))  # size 0, then a literal
    assert decoder.table == []
    decoder.decode(b"\x3f\xe1\x1f")  # back up to 4096, the advertised maximum: allowed
    decoder.decode(_literal_indexed_new_name("d", "4"))
    assert decoder.table == [("d", "4")]


def test_literal_with_an_indexed_name_uses_static_and_dynamic_names() -> None:
    decoder = Decoder()
    decoder.decode(_literal_indexed_new_name("x-custom", "1"))
    # 0x0f 0x10: without indexing, name index 15 + 16 = 31 (content-type)
    assert decoder.decode(b"\x0f\x10\x10application/grpc") == [("content-type", "application/grpc")]
    # 0x7e: with indexing, name index 62 (x-custom, from the dynamic table)
    assert decoder.decode(b"\x7e\x012") == [("x-custom", "2")]
    assert decoder.table == [("x-custom", "2"), ("x-custom", "1")]
    # 0x1f 0x2f: never indexed, name index 15 + 47 = 62 (x-custom again, now the newer one)
    assert decoder.decode(b"\x1f\x2f\x013") == [("x-custom", "3")]


def test_octets_above_ascii_decode_losslessly() -> None:
    block = b"\x00\x01n\x03\xe9\x00\xff"
    assert Decoder().decode(block) == [("n", "\xe9\x00\xff")]


# --- malformed blocks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "match"),
    [
        (b"\x80", "index 0"),
        (b"\xbe", "index 62 is beyond"),  # the dynamic table is empty
        (b"\xff\x80\x80\x80\x80\x80\x00", "continuation bytes"),  # zero padding, still too long
        (b"\xff\xff\xff\xff\xff\x7f", "exceeds 2\\*\\*31"),
        (b"\xff\x80", "ends inside an integer"),
        (b"\x3f\xe2\x1f", "size update to 4097 exceeds the advertised 4096"),
        (b"\x82\x20", "after the first header field"),
        (b"\x00\x05ab", "runs past the end"),
        (b"\x00\x7f\x80\x80\x04ab", "runs past the end"),  # 65663 octets claimed
        (b"\x00", "ends before a string literal"),
        (b"\x00\x01a", "ends before a string literal"),  # the value is missing
        (b"\x00\x81\xff", "padding"),  # Huffman name: 8 bits of padding
        (b"\x40\x84" + (0x3FFFFFFF << 2 | 0b11).to_bytes(4, "big") + b"\x00", "contains EOS"),
    ],
)
def test_malformed_blocks_raise_hpack_error(block: bytes, match: str) -> None:
    with pytest.raises(HpackError, match=match):
        Decoder().decode(block)


def test_index_just_past_the_dynamic_table() -> None:
    decoder = Decoder()
    decoder.decode(_literal_indexed_new_name("a", "1"))
    assert decoder.decode(b"\xbe") == [("a", "1")]
    with pytest.raises(HpackError, match="index 63 is beyond"):
        decoder.decode(b"\xbf")
    with pytest.raises(HpackError, match="index 63 is beyond"):
        decoder.decode(b"\x7f\x00\x01v")  # as a literal's name index


def _integer_tail(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(0x80 | value & 0x7F)
        value >>= 7
    return bytes([*out, value])


def test_integers_up_to_2_31_minus_1_only() -> None:
    largest = b"\xff" + _integer_tail(2**31 - 1 - 127)
    with pytest.raises(HpackError, match="index 2147483647 is beyond"):
        Decoder().decode(largest)
    with pytest.raises(HpackError, match="exceeds 2\\*\\*31 - 1"):
        Decoder().decode(b"\xff" + _integer_tail(2**31 - 127))


def test_size_update_up_to_the_advertised_maximum_only() -> None:
    decoder = Decoder(max_table_size=256)
    decoder.decode(b"\x3f\xe1\x01")  # 31 + 225 = 256
    with pytest.raises(HpackError, match="257 exceeds the advertised 256"):
        decoder.decode(b"\x3f\xe2\x01")


def test_header_list_limit_counts_names_values_and_32_per_field() -> None:
    fits = b"\x00\x01a" + bytes([67]) + b"v" * 67  # 1 + 67 + 32 = 100
    assert Decoder(max_header_list_size=100).decode(fits) == [("a", "v" * 67)]
    with pytest.raises(HpackError, match="header list exceeds 99 octets"):
        Decoder(max_header_list_size=99).decode(fits)
    # Across fields: two indexed :method GET (10 + 32 each) fit in 84, not in 83.
    assert len(Decoder(max_header_list_size=84).decode(b"\x82\x82")) == 2
    with pytest.raises(HpackError, match="header list exceeds 83 octets"):
        Decoder(max_header_list_size=83).decode(b"\x82\x82")


def test_a_string_longer_than_the_limit_is_refused_before_it_is_read() -> None:
    block = b"\x00\x7f\x81\x01" + b"n" * 256 + b"\x00"  # a 127 + 129 = 256 octet name
    with pytest.raises(HpackError, match="256 octets exceeds the header list size limit"):
        Decoder(max_header_list_size=200).decode(block)


_VALID_BLOCKS = [
    _hex(b) for series in (*_REQUEST_SERIES.values(), *_RESPONSE_SERIES.values()) for b in series
]


@settings(max_examples=500)
@given(st.lists(st.binary(max_size=120), min_size=1, max_size=4))
def test_random_blocks_decode_or_raise_hpack_error_only(blocks: list[bytes]) -> None:
    decoder = Decoder(max_table_size=256, max_header_list_size=1024)
    for block in blocks:
        try:
            fields = decoder.decode(block)
        except HpackError:
            return
        assert all(isinstance(n, str) and isinstance(v, str) for n, v in fields)
        assert decoder.table_size == sum(len(n) + len(v) + 32 for n, v in decoder.table) <= 256


@settings(max_examples=500)
@given(
    st.sampled_from(_VALID_BLOCKS),
    st.lists(st.tuples(st.integers(min_value=0, max_value=200), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(min_value=0, max_value=200),
)
def test_damaged_rfc_blocks_decode_or_raise_hpack_error_only(
    block: bytes, edits: list[tuple[int, int]], cut: int
) -> None:
    damaged = bytearray(block)
    for where, byte in edits:
        damaged[where % len(damaged)] = byte
    decoder = Decoder(max_table_size=256)
    try:
        fields = decoder.decode(bytes(damaged[: max(cut, 1)]))
    except HpackError:
        return
    assert all(isinstance(n, str) and isinstance(v, str) for n, v in fields)
    assert decoder.table_size == sum(len(n) + len(v) + 32 for n, v in decoder.table) <= 256


# --- the encoder ----------------------------------------------------------------------------------


def test_encode_uses_the_static_table_and_raw_literals() -> None:
    assert encode([(":status", "200"), ("content-type", "application/grpc")]) == (
        b"\x88" + b"\x0f\x10" + b"\x10application/grpc"
    )
    assert encode([("grpc-status", "0")]) == b"\x00\x0bgrpc-status\x010"
    assert encode([(":status", "201")]) == b"\x08\x03201"  # name index 8 < 15: one octet
    long_value = "x" * 200
    assert encode([("x", long_value)]) == b"\x00\x01x\x7f\x49" + long_value.encode()


def test_encode_integers_at_their_prefix_boundaries() -> None:
    # Name index 15 fills the 4-bit prefix; a 127-octet string fills the 7-bit one: both need a
    # continuation octet of 0.
    assert encode([("accept-charset", "x")]) == b"\x0f\x00\x01x"
    assert encode([("y", "v" * 127)]) == b"\x00\x01y\x7f\x00" + b"v" * 127
    assert (
        encode([("accept-charset", "x"), ("y", "v" * 127)]) == b"\x0f\x00\x01x\x00\x01y\x7f\x00" + b"v" * 127
    )
    fields = [("accept-charset", "x"), ("y", "v" * 127), ("z" * 126, "w" * 128)]
    assert Decoder().decode(encode(fields)) == fields


def test_encode_adds_nothing_to_the_peers_table() -> None:
    decoder = Decoder()
    decoder.decode(encode([(":status", "200"), ("grpc-status", "0"), ("content-type", "application/grpc")]))
    assert decoder.table == [] and decoder.table_size == 0


_NAMES = st.one_of(
    st.sampled_from([name for name, _ in STATIC_TABLE]),
    st.text(alphabet=string.ascii_lowercase + string.digits + "-_.", min_size=1, max_size=40),
)
_VALUES = st.one_of(
    st.sampled_from([value for _, value in STATIC_TABLE]),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=300),
)


@given(st.lists(st.tuples(_NAMES, _VALUES), max_size=20))
def test_encode_round_trips_through_the_decoder(fields: Fields) -> None:
    decoder = Decoder(max_header_list_size=1 << 20)
    assert decoder.decode(encode(fields)) == fields
    assert decoder.decode(encode(fields)) == fields  # and leaves nothing behind for the next block
    assert decoder.table == []
