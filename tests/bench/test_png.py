"""The pure-Python PNG writer and chart: the bytes decode as a PNG with the pixels drawn."""

from __future__ import annotations

import struct
import zlib

import pytest

from hack.bench.chart import bar_chart, placement_chart, placement_metrics
from hack.bench.png import FONT, GLYPH_H, GLYPH_W, Canvas


def decode(png: bytes) -> tuple[int, int, list[bytes]]:
    """A minimal independent PNG reader (RGB, 8 bit, filter 0 only): checks every CRC."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", png[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + data) & 0xFFFFFFFF, kind
        chunks.append((kind, data))
        pos += 12 + length
    assert next(k for k, _ in chunks) == b"IHDR" and chunks[-1][0] == b"IEND"
    w, h, depth, color, _, _, _ = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, color) == (8, 2)
    raw = zlib.decompress(b"".join(d for k, d in chunks if k == b"IDAT"))
    stride = 3 * w + 1
    rows = [raw[y * stride : (y + 1) * stride] for y in range(h)]
    assert all(r[0] == 0 for r in rows)
    return w, h, [r[1:] for r in rows]


def test_canvas_round_trips_pixels() -> None:
    c = Canvas(7, 5)
    c.rect(1, 1, 3, 4, (10, 20, 30))
    c.rect(-5, -5, 1, 1, (1, 2, 3))  # clipped
    w, h, rows = decode(c.png())
    assert (w, h) == (7, 5)

    def px(x: int, y: int) -> tuple[int, ...]:
        return tuple(rows[y][3 * x : 3 * x + 3])

    assert px(0, 0) == (1, 2, 3)
    assert px(1, 1) == px(2, 3) == (10, 20, 30)
    assert px(3, 1) == (255, 255, 255) and px(1, 4) == (255, 255, 255)


def test_font_glyphs_are_5x7_and_text_inks() -> None:
    for ch, glyph in FONT.items():
        assert len(glyph) == GLYPH_H and all(len(r) == GLYPH_W and set(r) <= {".", "#"} for r in glyph), ch
    c = Canvas(40, 20)
    end = c.text(0, 0, "I", scale=2)
    assert end == 12
    assert c.pixel(4, 0) == (0, 0, 0)  # the top bar of I: column 1..3 at scale 2
    assert c.pixel(0, 0) == (255, 255, 255)


def test_bar_chart_needs_one_value_per_group() -> None:
    with pytest.raises(ValueError):
        bar_chart(["a", "b"], [("s", [1.0])], "t")


def test_placement_chart_draws_bars_in_proportion() -> None:
    r = {
        "accelerators_total": 100,
        "accelerators_placed": 50,
        "pairs": 10,
        "aligned_switch": 1.0,
        "aligned_numa": 0.5,
        "aligned_socket": None,
        "pairs_cross_socket": 0,
        "stranded_accelerators_aligned": 25,
    }
    values = [v for _, v in placement_metrics(r)]
    assert values == [50.0, 100.0, 50.0, 0.0, 0.0, 25.0]
    w, h, rows = decode(placement_chart([r, r], ["A", "B"]))
    assert (w, h) == (1100, 520)
    red = (214, 96, 77)

    def red_in_column(x: int) -> int:
        return sum(1 for y in range(h) if tuple(rows[y][3 * x : 3 * x + 3]) == red)

    # the first series' bar of group g is about 100 px into the group's 170 px slot (left margin 60)
    heights = [red_in_column(60 + 170 * g + 40) for g in range(6)]
    assert heights[1] > 300  # 100 % of a 380 px plot
    assert heights[0] == pytest.approx(heights[1] / 2, abs=2)
    assert heights[5] == pytest.approx(heights[1] / 4, abs=2)
    assert heights[3] == heights[4] == 0
