"""The HPACK Huffman code (RFC 7541 Appendix B) and its decoder.

Peers may send any header string Huffman-coded, so the server must decode it; it never needs to
encode (responses go out raw).
"""

from __future__ import annotations

__all__ = ["CODES", "EOS", "HuffmanError", "decode"]


class HuffmanError(ValueError):
    """A Huffman string that no conforming encoder produces (RFC 7541 section 5.2)."""


EOS = 256

# Bit length of each symbol's code, symbols 0..256 (256 is EOS). The code is canonical: codes
# are handed out in order of (length, symbol), each the previous plus one, shifted left whenever
# the length grows, so the lengths alone fix every code of the RFC's table.
# fmt: off
_LENGTHS = (
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,  # 0-15
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,  # 16-31
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,  # 32-47
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,  # 48-63
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,  # 64-79
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,  # 80-95
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,  # 96-111
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,  # 112-127
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,  # 128-143
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,  # 144-159
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,  # 160-175
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,  # 176-191
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,  # 192-207
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,  # 208-223
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,  # 224-239
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,  # 240-255
    30,  # 256 (EOS)
)
# fmt: on


def _canonical_codes(lengths: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    codes = [(0, 0)] * len(lengths)
    code = 0
    prev = 0
    for sym in sorted(range(len(lengths)), key=lambda s: (lengths[s], s)):
        code <<= lengths[sym] - prev
        prev = lengths[sym]
        codes[sym] = (code, prev)
        code += 1
    return tuple(codes)


CODES = _canonical_codes(_LENGTHS)
"""(code, bit length) per symbol, 0..256."""


# The decoder reads 8 bits at a time. Each table has 256 entries: a code that ends within the
# byte read is a leaf, packed as symbol << 5 | code length (the length lets the reader advance
# by exactly the code's bits, the rest of the byte belongs to the next code); a code that goes
# on past the byte is a negative index of the table for the next 8 bits. Codes of up to 8 bits
# cover the common characters (letters, digits, most punctuation), so those cost one look-up.
def _build_tables() -> list[list[int]]:
    tables: list[list[int]] = [[0] * 256]
    for sym, (code, length) in enumerate(CODES):
        table = tables[0]
        shift = length - 8  # bits of the code below the current byte
        while shift > 0:
            byte = (code >> shift) & 0xFF
            nxt = table[byte]
            if nxt == 0:
                nxt = -len(tables)
                tables.append([0] * 256)
                table[byte] = nxt
            table = tables[-nxt]
            shift -= 8
        # The code's last (8 + shift) bits start this byte; every byte with that prefix is it.
        base = (code << -shift) & 0xFF
        leaf = sym << 5 | length
        for i in range(base, base + (1 << -shift)):
            table[i] = leaf
    return tables


_TABLES = _build_tables()
_ROOT = _TABLES[0]
# The input is read in chunks that become one integer each; a single integer for a long string
# would make every shift cost its whole length, quadratic in a hostile 64 KiB value.
_CHUNK = 64


def decode(data: bytes) -> bytes:
    """Decode a Huffman-coded HPACK string.

    Padding must be at most 7 bits and all ones (a prefix of EOS), and EOS must not appear:
    the RFC makes both decoding errors, and tolerating them would let a peer smuggle bits.
    """
    size = len(data)
    total = size << 3
    root = _ROOT
    tables = _TABLES
    out = bytearray()
    append = out.append
    first = 0  # byte where the current chunk starts
    pos = 0  # bit position within the current chunk
    while True:
        chunk = data[first : first + _CHUNK]
        last = first + _CHUNK >= size
        # A code is read as up to four 8-bit windows, so in any chunk but the last, decoding
        # stops 32 bits short of its end and the next chunk starts at the byte it stopped in.
        stop = total - (first << 3) if last else (_CHUNK << 3) - 32
        # The chunk followed by 32 one bits: a window that runs past the end of the string then
        # decodes to EOS exactly when the real bits left over are all ones.
        bits = (int.from_bytes(chunk, "big") << 32) | 0xFFFFFFFF
        top = (len(chunk) << 3) + 24  # shift that brings the window at bit 0 down to bits 0..7
        try:
            while pos < stop:
                shift = top - pos
                entry = root[(bits >> shift) & 0xFF]
                while entry < 0:
                    shift -= 8
                    entry = tables[-entry][(bits >> shift) & 0xFF]
                # EOS is the only symbol over 255: bytearray refuses it with ValueError, which
                # keeps the check off this loop's path.
                append(entry >> 5)
                pos += entry & 31
        except ValueError:
            if not last or pos + 30 <= stop:
                raise HuffmanError("Huffman string contains EOS") from None
            if stop - pos > 7:
                raise HuffmanError("Huffman string has more than 7 bits of padding") from None
            return bytes(out)
        if last:
            break
        first += pos >> 3
        pos &= 7
    if pos != stop:
        # The last code ran past the end, over bits that were not all ones.
        raise HuffmanError("Huffman string padding is not a prefix of EOS")
    return bytes(out)
