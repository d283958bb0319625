"""The shapes of the sysfs names discovery looks for: `cpuN`, `nodeN`, a PCI address, a root
bus, a MAC address.

String methods, not `re`: compiling discovery's dozen patterns cost about a millisecond of every
`topodra inspect` on the benchmark machine (hack/bench-peer), and each test is a prefix, a run of
digits or a few hex pairs. The rules are those of the patterns they replace: a decimal digit is
any Unicode decimal digit (what `\\d` matches in text and `int()` reads), a hex digit is ASCII
only; tests/unit/topology/test_topology_names.py holds both side by side.
"""

from __future__ import annotations

_HEX = frozenset("0123456789abcdefABCDEF")
_FUNCTIONS = frozenset("01234567")


def numbered(name: str, prefix: str) -> int | None:
    """N of `<prefix>N` (N one or more decimal digits), else None."""
    if name.startswith(prefix):
        digits = name[len(prefix) :]
        if digits.isdecimal():
            return int(digits)
    return None


def is_numbered(name: str, *prefixes: str) -> bool:
    """`name` is one of the prefixes followed by one or more decimal digits."""
    return any(name.startswith(p) and name[len(p) :].isdecimal() for p in prefixes)


def is_pci_address(name: str) -> bool:
    """`DDDD:BB:DD.F`: a domain of four or more hex digits, bus and device of two, function 0-7."""
    return (
        len(name) >= 12
        and name[-1] in _FUNCTIONS
        and name[-2] == "."
        and name[-5] == ":"
        and name[-8] == ":"
        and _HEX.issuperset(name[:-8])
        and _HEX.issuperset(name[-7:-5])
        and _HEX.issuperset(name[-4:-2])
    )


def is_root_bus(name: str) -> bool:
    """`pciDDDD:BB`, a root bus under sys/devices: a domain of four or more hex digits, a bus of two."""
    return (
        len(name) >= 10
        and name.startswith("pci")
        and name[-3] == ":"
        and _HEX.issuperset(name[3:-3])
        and _HEX.issuperset(name[-2:])
    )


def is_mac(text: str) -> bool:
    """Two or more colon-separated pairs of hex digits (Ethernet's six, InfiniBand's twenty)."""
    pairs = text.split(":")
    return len(pairs) > 1 and all(len(p) == 2 and _HEX.issuperset(p) for p in pairs)
