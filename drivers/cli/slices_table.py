"""`topodra slices -o text|wide`: the devices of ResourceSlices as a table for people.

One row per device; the columns are what a claim aligns on (socket, NUMA node, PCIe root and
switch) and what it asks for (capacity). `wide` adds the slice, the PCI address, the leaf switch
(where switches are nested it differs from the switch) and the attributes that tell devices of
one driver apart (interface, RDMA device, link speed, type).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

STD = "resource.kubernetes.io/"
TOPO = "topology.topodra.io/"
# driver-domain attributes shown in the wide table's DETAILS, in this order, when present
DETAIL_KEYS = (
    "interfaceName",
    "rdmaDevice",
    "linkSpeedMbps",
    "type",
    "productName",
    "model",
    "cpuCount",
    "coreCount",
    "threadsPerCore",
    "l3CacheID",
    "sriovPhysicalFunction",
    "kernelDriver",
)


def _value(attr: Mapping[str, Any] | None) -> str:
    if not attr:
        return "-"
    for kind in ("string", "int", "bool", "version"):
        if kind in attr:
            v = attr[kind]
            return str(v).lower() if isinstance(v, bool) else str(v)
    for kind in ("strings", "ints", "bools", "versions"):  # list attributes (DRAListTypeAttributes)
        if kind in attr:
            return ",".join(str(v) for v in attr[kind])
    return "?"


def _capacity(device: Mapping[str, Any]) -> str:
    parts = []
    for key, cap in sorted((device.get("capacity") or {}).items()):
        parts.append(f"{key.rpartition('/')[2]}={cap.get('value', '?')}")
    return ",".join(parts) or "-"


def _details(device: Mapping[str, Any], driver: str) -> str:
    attrs = device.get("attributes") or {}
    out = []
    for key in DETAIL_KEYS:
        full = f"{driver}/{key}"
        if full in attrs:
            out.append(f"{key}={_value(attrs[full])}")
    if device.get("taints"):
        out.append("tainted=" + ",".join(t.get("key", "?") for t in device["taints"]))
    return " ".join(out) or "-"


def rows(slices: Iterable[Mapping[str, Any]], wide: bool) -> list[list[str]]:
    header = ["DRIVER", "DEVICE", "SOCKET", "NUMA", "PCIE-ROOT", "PCIE-SWITCH", "CAPACITY"]
    if wide:
        header += ["SLICE", "PCI-BUS-ID", "PCIE-LEAF-SWITCH", "DETAILS"]
    out = [header]
    for s in slices:
        spec = s["spec"]
        driver = spec["driver"]
        name = s["metadata"].get("name") or s["metadata"].get("generateName", "")
        for d in spec.get("devices") or []:
            a = d.get("attributes") or {}
            row = [
                driver.partition(".")[0],
                d["name"],
                _value(a.get(f"{TOPO}socket")),
                _value(a.get(f"{STD}numaNode")),
                _value(a.get(f"{STD}pcieRoot")),
                _value(a.get(f"{TOPO}pcieSwitch")),
                _capacity(d),
            ]
            if wide:
                row += [
                    name,
                    _value(a.get(f"{STD}pciBusID")),
                    _value(a.get(f"{TOPO}pcieLeafSwitch")),
                    _details(d, driver),
                ]
            out.append(row)
    return out


def render(table: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart (kubectl's layout)."""
    if len(table) <= 1:
        return "No devices.\n"
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    return "\n".join(lines) + "\n"
