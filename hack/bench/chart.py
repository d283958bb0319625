"""The placement study's PNG: grouped bars, one group per metric, one bar per scenario."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hack.bench.png import GLYPH_H, RGB, Canvas, text_width

COLORS: Sequence[RGB] = ((214, 96, 77), (67, 147, 195), (120, 120, 120))
GRID: RGB = (225, 225, 225)
INK: RGB = (30, 30, 30)


def _share(r: Mapping[str, Any], key: str) -> float:
    v = r.get(key)
    return 0.0 if v is None else 100.0 * float(v)


def placement_metrics(r: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(label, percent) per bar group; all on one 0-100 scale."""
    total = max(1, int(r["accelerators_total"]))
    pairs = max(1, int(r["pairs"]))
    return [
        ("ACCELERATORS USED", 100.0 * r["accelerators_placed"] / total),
        ("PAIRS SAME SWITCH", _share(r, "aligned_switch")),
        ("PAIRS+CPU SAME NUMA", _share(r, "aligned_numa")),
        ("PAIRS+CPU SAME SOCKET", _share(r, "aligned_socket")),
        ("PAIRS CROSS-SOCKET", 100.0 * r["pairs_cross_socket"] / pairs),
        ("ACCELERATORS STRANDED", 100.0 * r["stranded_accelerators_aligned"] / total),
    ]


def bar_chart(
    groups: Sequence[str],
    series: Sequence[tuple[str, Sequence[float]]],
    title: str,
    *,
    width: int = 1100,
    height: int = 520,
) -> bytes:
    """Grouped vertical bars on a 0-100 % axis, values written above each bar."""
    if not series or any(len(values) != len(groups) for _, values in series):
        raise ValueError("every series needs one value per group")
    c = Canvas(width, height)
    left, right, top, bottom = 60, 20, 70, 70
    plot_w, plot_h = width - left - right, height - top - bottom
    c.text(left, 16, title, INK, 2)
    lx = left
    for i, (name, _) in enumerate(series):  # legend
        c.rect(lx, 44, lx + 14, 58, COLORS[i % len(COLORS)])
        lx = c.text(lx + 20, 45, name, INK, 2) + 24
    for tick in range(0, 101, 20):
        y = top + plot_h - tick * plot_h // 100
        c.rect(left, y, left + plot_w, y + 1, GRID)
        label = f"{tick}%"
        c.text(left - 8 - text_width(label, 1), y - GLYPH_H // 2, label, INK, 1)
    c.rect(left, top + plot_h, left + plot_w, top + plot_h + 2, INK)
    slot = plot_w // len(groups)
    bar = max(4, (slot - 24) // len(series))
    for g, label in enumerate(groups):
        x0 = left + g * slot + (slot - bar * len(series)) // 2
        for s, (_, values) in enumerate(series):
            v = max(0.0, min(100.0, values[g]))
            h = round(v * plot_h / 100)
            bx = x0 + s * bar
            c.rect(bx + 2, top + plot_h - h, bx + bar - 2, top + plot_h, COLORS[s % len(COLORS)])
            num = f"{values[g]:.0f}"
            c.text(bx + (bar - text_width(num, 1)) // 2, top + plot_h - h - 10, num, INK, 1)
        words = label.split(" ")
        lines = [
            " ".join(words[: len(words) // 2 + len(words) % 2]),
            " ".join(words[len(words) // 2 + len(words) % 2 :]),
        ]
        for li, line in enumerate(lines):
            cx = left + g * slot + (slot - text_width(line, 1)) // 2
            c.text(cx, top + plot_h + 10 + li * 12, line, INK, 1)
    return c.png()


def placement_chart(results: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> bytes:
    per = [placement_metrics(r) for r in results]
    groups = [name for name, _ in per[0]]
    series = [(label, [v for _, v in m]) for label, m in zip(labels, per, strict=True)]
    return bar_chart(groups, series, "PLACEMENT ON THE REAL SCHEDULER (PERCENT)")


def churn_chart(churn: Mapping[str, Any], labels: Mapping[str, str], total: int, points: int = 8) -> bytes:
    """Stranded accelerators (percent of all) at evenly spaced events of the churn phase, per arm."""
    arms = [s for s in labels if s in churn]
    events = max(t[0] for s in arms for t in churn[s]["timeline"])
    marks = sorted({round(i * events / (points - 1)) for i in range(points)})
    groups = [f"EVENT {m}" for m in marks]
    series = []
    for s in arms:
        values = []
        for m in marks:
            row = [t for t in churn[s]["timeline"] if t[0] <= m][-1]
            values.append(100.0 * row[4] / max(1, total))
        series.append((labels[s], values))
    return bar_chart(groups, series, "STRANDED ACCELERATORS DURING CHURN (PERCENT OF ALL)")
