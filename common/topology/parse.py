"""Parsers for the handful of value formats sysfs uses, plus readers that warn on garbage.

Parsers are pure and return None for anything they do not fully understand: a half-parsed value
is worse than none. The `read_*` helpers turn a None from a file that exists into a warning
naming the file, so discovery can go on.
"""

from __future__ import annotations

from topodra.common.topology.reader import SysfsReader, shown

# for annotations only (strings here): importing collections.abc costs ~0.2 ms on the inspect path
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

_HEX = frozenset("0123456789abcdefABCDEF")
_DEC = frozenset("0123456789")
# sysfs integers are at most 64 bits (20 digits); a longer run of digits is garbage, and past
# 4300 digits int() would raise instead of answering.
_MAX_DIGITS = 20
# The most CPUs any Linux architecture can be built for is 8192 (CONFIG_NR_CPUS); lists read
# from a tree of unknown origin may name CPUs up to this, leaving room for kernels to come.
MAX_CPU = (1 << 16) - 1


def parse_int(text: str) -> int | None:
    t = text.strip()
    body = t[1:] if t[:1] in "+-" else t
    if not body or len(body) > _MAX_DIGITS or not _DEC.issuperset(body):
        return None
    return int(t)


def parse_hex(text: str) -> int | None:
    """'0x10de' or '10de'."""
    t = text.strip()
    if t[:2] in ("0x", "0X"):
        t = t[2:]
    if not t or not _HEX.issuperset(t):
        return None
    return int(t, 16)


def bits(value: int) -> tuple[int, ...]:
    """Positions of the set bits, lowest first."""
    s = bin(value)[:1:-1]  # binary digits, least significant first, without "0b"
    out = []
    i = s.find("1")
    while i >= 0:
        out.append(i)
        i = s.find("1", i + 1)
    return tuple(out)


_NOT_MASK = str.maketrans("", "", "0123456789abcdefABCDEF,")


def parse_cpumask(text: str) -> frozenset[int] | None:
    """Kernel bitmap: comma-separated 32-bit hex words, most significant first ('ff,00000001')."""
    t = text.strip()
    if not t:
        return frozenset()
    if t.translate(_NOT_MASK) or ",," in t or t[0] == "," or t[-1] == ",":
        return None
    value = int(t.replace(",", ""), 16)
    if value.bit_length() > MAX_CPU + 1:
        return None
    return frozenset(bits(value))


def cached_cpumask(r: SysfsReader, text: str) -> frozenset[int] | None:
    """parse_cpumask through the reader's memo: sibling files repeat one mask hundreds of times."""
    memo: dict[str, frozenset[int] | None] = r.memo
    if text in memo:
        return memo[text]
    value = parse_cpumask(text)
    memo[text] = value
    return value


def parse_cpulist(text: str, highest: int = MAX_CPU) -> frozenset[int] | None:
    """Kernel list: '0-3,8,10-11' (empty means no CPUs); None past CPU `highest`.

    The whole list is checked before any range is expanded: every CPU at most `highest`, and
    all ranges together (repeats counted) at most `highest + 1` CPUs, so what a list costs is
    bounded by the machine, not by its text ("0-1048576" is nine characters and a million CPUs).
    Callers holding a tenant's list pass the machine's highest CPU.
    """
    t = text.strip()
    if not t:
        return frozenset()
    budget = highest + 1
    spans: list[tuple[int, int]] = []
    for part in t.split(","):
        lo, sep, hi = part.partition("-")
        a = parse_int(lo) if lo else None
        if a is None or a < 0 or a > highest:
            return None
        b = a
        if sep:
            end = parse_int(hi) if hi else None
            if end is None or end < a or end > highest:
                return None
            b = end
        budget -= b - a + 1
        if budget < 0:
            return None
        spans.append((a, b))
    out: set[int] = set()
    for a, b in spans:
        out.update(range(a, b + 1))
    return frozenset(out)


def parse_size(text: str) -> int | None:
    """Cache sizes: '32K', '1024K', '8M', or plain bytes."""
    t = text.strip()
    mult = 1
    if t[-1:] in ("K", "k"):
        mult, t = 1024, t[:-1]
    elif t[-1:] in ("M", "m"):
        mult, t = 1024 * 1024, t[:-1]
    elif t[-1:] in ("G", "g"):
        mult, t = 1024 * 1024 * 1024, t[:-1]
    n = parse_int(t)
    return None if n is None or n < 0 else n * mult


def compress(cpus: Iterable[int]) -> str:
    """'0-3,8,10-11': how a person (and the kernel) writes CPU lists."""
    out: list[str] = []
    start = prev = None
    for c in sorted(set(cpus)):
        if start is None:
            start = prev = c
        elif prev is not None and c == prev + 1:
            prev = c
        else:
            out.append(f"{start}-{prev}" if start != prev else f"{start}")
            start = prev = c
    if start is not None:
        out.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ",".join(out)


# --- readers that warn ---------------------------------------------------------------------------


def _read_number(
    r: SysfsReader, rel: str, parse: Callable[[str], int | None], what: str, required: bool
) -> int | None:
    text = r.read(rel)
    if text is None:
        if required:
            r.warn(rel, "missing")
        return None
    value = parse(text)
    if value is None:
        r.warn(rel, f"not {what}: {shown(text)}")
    return value


def read_int(r: SysfsReader, rel: str, *, required: bool = False) -> int | None:
    return _read_number(r, rel, parse_int, "an integer", required)


def read_hex(r: SysfsReader, rel: str, *, required: bool = False) -> int | None:
    return _read_number(r, rel, parse_hex, "a hex number", required)


def read_id(r: SysfsReader, rel: str, *, required: bool = False) -> int | None:
    """An id or count where the kernel writes -1 for "none" (numa_node, physical_package_id)."""
    value = read_int(r, rel, required=required)
    return None if value is None or value < 0 else value


def read_cpus(r: SysfsReader, mask_rel: str | None, list_rel: str | None) -> frozenset[int] | None:
    """A CPU set from the mask file, else the list file; None (and a warning) on garbage."""
    for rel, is_mask in ((mask_rel, True), (list_rel, False)):
        if rel is None:
            continue
        text = r.read(rel)
        if text is None:
            continue
        value = cached_cpumask(r, text) if is_mask else parse_cpulist(text)
        if value is not None:
            return value
        r.warn(rel, f"not a CPU {'mask' if is_mask else 'list'}: {shown(text)}")
    return None
