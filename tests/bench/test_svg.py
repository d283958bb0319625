"""The SVG bar panels: well-formed XML, one bar per value, heights proportional within a panel."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from hack.bench.svg import panels

NS = "{http://www.w3.org/2000/svg}"


def bars(svg: str) -> list[tuple[float, str]]:
    """(height, tooltip) of every bar: the rects that carry a <title>."""
    root = ET.fromstring(svg)
    out = []
    for rect in root.iter(f"{NS}rect"):
        title = rect.find(f"{NS}title")
        if title is not None:
            out.append((float(rect.attrib["height"]), title.text or ""))
    return out


def test_each_panel_scales_to_its_own_largest_bar() -> None:
    svg = panels("T & co", ["none", "nri"], [("p99 µs", [400.0, 100.0]), ("req/s", [5.0, 10.0])])
    got = bars(svg)
    assert [t for _, t in got] == ["none: 400", "nri: 100", "none: 5.00", "nri: 10.0"]
    (a, _), (b, _), (c, _), (d, _) = got
    assert a == pytest.approx(4 * b) and d == pytest.approx(2 * c) and a == pytest.approx(d)
    assert "T &amp; co" in svg


def test_a_missing_value_is_said_not_drawn() -> None:
    svg = panels("t", ["a", "b"], [("energy", [None, 2.0])])
    assert [t for _, t in bars(svg)] == ["b: 2.00"]
    assert ">n/a<" in svg


def test_shapes_are_checked() -> None:
    with pytest.raises(ValueError):
        panels("t", ["a", "b"], [("x", [1.0])])
    with pytest.raises(ValueError):
        panels("t", [], [])
