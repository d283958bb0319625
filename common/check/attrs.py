"""Attribute values as ResourceSlices carry them, and what their names say about locality.

A device attribute in the API is an object with exactly one of `int`, `bool`, `string`,
`version` or (with DRAListTypeAttributes) `ints`, `bools`, `strings`, `versions`. `Value` keeps
which one was used, because the scheduler compares kinds strictly (an `int` 0 never matches a
`string` "0") and a list matches by intersection: the check must reason exactly as it does.

Unqualified names belong to the driver's own domain (the API's rule); `qualify` applies it so
every name below is `<domain>/<identifier>`.

Names outside the standard ones are classified by their identifier (`dra.net/numaNode`,
`dra.cpu/numaNodeID`, `gpu.nvidia.com/numa` are all NUMA) so the report can say "this driver
publishes NUMA, but not under the standard name".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from topodra.common import pciattrs

STD = pciattrs.STD
TOPO = pciattrs.TOPO
PCI_BUS_ID = pciattrs.PCI_BUS_ID
PCIE_ROOT = pciattrs.PCIE_ROOT
NUMA_NODE = pciattrs.NUMA_NODE
PCIE_SWITCH = pciattrs.PCIE_SWITCH
PCIE_LEAF_SWITCH = pciattrs.PCIE_LEAF_SWITCH
SOCKET = pciattrs.SOCKET

SCALAR_KINDS = ("int", "bool", "string", "version")
LIST_KINDS = ("ints", "bools", "strings", "versions")
MAX_LIST = 1024  # the API allows 48 values per device; anything longer is not a real slice

# identifier (lowercase) -> what it names, for names under a driver's own domain
_OWN_NAMES = {
    "numanode": "numa",
    "numanodeid": "numa",
    "numa": "numa",
    "numaid": "numa",
    "pciaddress": "address",
    "pcibusid": "address",
    "pciaddr": "address",
    "bdf": "address",
    "pcieroot": "root",
    "pciroot": "root",
    "pcieswitch": "switch",
    "pcieleafswitch": "leaf",
    "socket": "socket",
    "socketid": "socket",
    "cpusocketid": "socket",
    "ifname": "interface",
    "interfacename": "interface",
    "cpus": "cpus",
    "cpulist": "cpus",
    "cpuset": "cpus",
}


@dataclass(frozen=True, slots=True)
class Value:
    """One attribute value. `kind` is the API field used, or "invalid" (then `problem` says why)."""

    kind: str
    value: Any
    problem: str = ""

    @property
    def is_list(self) -> bool:
        return self.kind in LIST_KINDS

    @property
    def base(self) -> str:
        """`int` for both `int` and `ints`: the kind the scheduler compares."""
        return self.kind[:-1] if self.is_list else self.kind

    @property
    def items(self) -> tuple[Any, ...]:
        if self.kind == "invalid":
            return ()
        return tuple(self.value) if self.is_list else (self.value,)

    def show(self) -> str:
        """As a person reads it: `0`, `"pci0000:00"`, `[0, 1]`, or what was invalid."""
        if self.kind == "invalid":
            return f"invalid ({self.problem})"
        shown = [
            f'"{v}"' if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)
            for v in self.items
        ]
        return f"[{', '.join(shown)}]" if self.is_list else shown[0]

    def to_json(self) -> dict[str, Any]:
        if self.kind == "invalid":
            return {"invalid": self.problem}
        return {self.kind: list(self.value) if self.is_list else self.value}


def parse_value(raw: Any) -> Value:
    """The API's attribute object -> Value; never raises (a bad one becomes kind "invalid")."""
    if not isinstance(raw, Mapping):
        return Value("invalid", raw, "not an object with one value field")
    fields = [k for k in (*SCALAR_KINDS, *LIST_KINDS) if k in raw]
    if len(fields) != 1:
        found = ", ".join(sorted(str(k) for k in raw)) or "none"
        return Value("invalid", None, f"exactly one value field expected, found {found}")
    kind = fields[0]
    v = raw[kind]
    if kind in LIST_KINDS:
        if not isinstance(v, list) or not v:
            return Value("invalid", None, f"{kind} must be a non-empty list")
        if len(v) > MAX_LIST:
            return Value("invalid", None, f"{kind} has {len(v)} values")
        elems = [_scalar(kind[:-1], e) for e in v]
        if any(e is None for e in elems):
            return Value("invalid", None, f"{kind} holds a value that is not a {kind[:-1]}")
        return Value(kind, tuple(elems))
    one = _scalar(kind, v)
    if one is None:
        return Value("invalid", None, f"{kind} value {str(v)[:40]!r} is not a {kind}")
    return Value(kind, one)


def _scalar(kind: str, v: Any) -> Any:
    if kind == "bool":
        return v if isinstance(v, bool) else None
    if kind == "int":
        return v if isinstance(v, int) and not isinstance(v, bool) else None
    return v if isinstance(v, str) else None


def qualify(driver: str, name: str) -> str:
    """`type` of driver gpu.nvidia.com -> `gpu.nvidia.com/type` (unqualified = driver's domain)."""
    return name if "/" in name else f"{driver}/{name}"


def domain_of(name: str) -> str:
    return name.partition("/")[0]


def identifier_of(name: str) -> str:
    return name.rpartition("/")[2]


def own_meaning(name: str) -> str | None:
    """What a name outside the standard and topodra vocabularies says about locality, if
    anything: "numa", "address", "root", "switch", "leaf", "socket", "interface" or "cpus"."""
    if domain_of(name) in (STD, TOPO):
        return None
    return _OWN_NAMES.get(identifier_of(name).lower())
