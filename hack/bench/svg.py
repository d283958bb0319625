"""Bar charts as SVG text for docs/bench: one small panel per figure, each on its own axis.

Figures of different units (microseconds, requests/s, switches) side by side on one scale would
hide the small ones, so every panel starts at zero and ends at its own largest bar; the value is
written on each bar. Plain text out, no dependency: the file renders on GitHub and in browsers.
"""

from __future__ import annotations

from collections.abc import Sequence
from xml.sax.saxutils import escape

COLORS = ("#d6604d", "#4393c3", "#5aae61", "#787878")
Panel = tuple[str, Sequence[float | None]]  # title, one value per series (None: not measured)


def _num(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def panels(
    title: str,
    series: Sequence[str],
    figures: Sequence[Panel],
    *,
    columns: int = 3,
    panel_w: int = 260,
    panel_h: int = 200,
) -> str:
    """A grid of panels, one per figure, one bar per series (same colour everywhere)."""
    if not series or not figures:
        raise ValueError("a chart needs at least one series and one figure")
    if any(len(values) != len(series) for _, values in figures):
        raise ValueError("every figure needs one value per series")
    rows = (len(figures) + columns - 1) // columns
    head = 60
    width, height = columns * panel_w, head + rows * panel_h
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="10" y="22" font-size="16" font-weight="bold">{escape(title)}</text>',
    ]
    x = 10
    for i, name in enumerate(series):  # legend
        out.append(f'<rect x="{x}" y="34" width="12" height="12" fill="{COLORS[i % len(COLORS)]}"/>')
        out.append(f'<text x="{x + 16}" y="45">{escape(name)}</text>')
        x += 24 + 8 * len(name)
    top_pad, bottom_pad, side = 34, 16, 20
    for n, (label, values) in enumerate(figures):
        px, py = (n % columns) * panel_w, head + (n // columns) * panel_h
        out.append(f'<text x="{px + side}" y="{py + 18}" font-weight="bold">{escape(label)}</text>')
        base = py + panel_h - bottom_pad
        plot_h = panel_h - top_pad - bottom_pad - 14
        out.append(
            f'<line x1="{px + side}" y1="{base}" x2="{px + panel_w - side}" y2="{base}" stroke="#1e1e1e"/>'
        )
        largest = max((v for v in values if v is not None), default=0.0) or 1.0
        slot = (panel_w - 2 * side) / len(series)
        for i, v in enumerate(values):
            bx = px + side + i * slot + slot * 0.15
            bw = slot * 0.7
            if v is None:
                out.append(f'<text x="{bx + bw / 2:.1f}" y="{base - 4}" text-anchor="middle">n/a</text>')
                continue
            h = max(0.0, v) / largest * plot_h
            out.append(
                f'<rect x="{bx:.1f}" y="{base - h:.1f}" width="{bw:.1f}" height="{h:.1f}" '
                f'fill="{COLORS[i % len(COLORS)]}"><title>{escape(series[i])}: {_num(v)}</title></rect>'
            )
            out.append(
                f'<text x="{bx + bw / 2:.1f}" y="{base - h - 4:.1f}" text-anchor="middle">{_num(v)}</text>'
            )
    out.append("</svg>")
    return "\n".join(out) + "\n"
