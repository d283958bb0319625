"""CPU sets printed the way the kernel prints them (`%*pb` masks and `%*pbl` lists)."""

from __future__ import annotations

from collections.abc import Iterable


def cpumask(cpus: Iterable[int], nbits: int) -> str:
    """Hex mask of `nbits` bits (nr_cpu_ids) in comma-separated 32-bit words, most significant first.

    The first word is only as wide as its bits need: 80 bits print as `0000,ffffffff,ffffffff`.
    """
    value = 0
    for cpu in cpus:
        value |= 1 << cpu
    words = []
    remaining = nbits
    while remaining > 0:
        width = remaining % 32 or 32
        remaining -= width
        chunk = (value >> remaining) & ((1 << width) - 1)
        words.append(f"{chunk:0{(width + 3) // 4}x}")
    return ",".join(words)


def cpulist(cpus: Iterable[int]) -> str:
    """Ranges like `0-3,8,10-11`; empty for no CPUs."""
    ordered = sorted(set(cpus))
    parts = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)
