"""The fixtures' expected.json schema (../shared/fixtures/README.md), computed from a Topology.

Kept beside the tests, not in the library: it is the independent reader's vocabulary (kB sizes,
"Data"/"Unified", 4-hex class without prog-if), not ours.
"""

from __future__ import annotations

from typing import Any

from topodra.common.topology.model import Topology

_TYPE = {"data": "Data", "instruction": "Instruction", "unified": "Unified"}


def _hex4(v: int | None) -> str | None:
    return None if v is None else f"{v:04x}"


def expected_view(t: Topology) -> dict[str, Any]:
    return {
        "cpus": list(t.usable_cpus()),
        "complete_cpus": [c.id for c in t.cpus],
        "packages": [{"id": p.id, "cpus": list(p.cpus)} for p in t.packages],
        "numa": [
            {
                "id": n.id,
                "cpus": list(n.cpus),
                "memory_kb": None if n.memory_bytes is None else n.memory_bytes // 1024,
            }
            for n in t.numa_nodes
        ],
        "caches": [
            {
                "level": c.level,
                "type": _TYPE[c.type],
                "cpus": list(c.cpus),
                "size_kb": None if c.size_bytes is None else c.size_bytes // 1024,
                "id": c.id,
            }
            for c in t.caches
        ],
        "cores": [
            {
                "package": None if c.package is None else t.packages[c.package].id,
                "core_id": c.id,
                "cpus": list(c.cpus),
            }
            for c in t.cores
        ],
        "pci": [
            {
                "bdf": p.address,
                "class": None if p.class_code is None else f"{p.class_code >> 8:04x}",
                "vendor": _hex4(p.vendor),
                "device": _hex4(p.device),
                "subvendor": _hex4(p.subsystem_vendor),
                "subdevice": _hex4(p.subsystem_device),
                "numa": p.numa_node,
                "local_cpus": list(p.local_cpus),
                "root": p.root_bus,
                "bridges": None if p.bridges is None else list(p.bridges),
            }
            for p in t.pci_devices
        ],
        "net": [{"name": i.name, "pci": i.pci_address} for i in t.net_interfaces],
    }


def repr_key(item: dict[str, Any]) -> str:
    return repr(sorted(item.items()))


def normalized(view: dict[str, Any]) -> dict[str, Any]:
    """Order-free form: lists of objects sorted, so only content is compared."""
    out: dict[str, Any] = {}
    for k, v in view.items():
        if v and isinstance(v[0], dict):
            out[k] = sorted(v, key=repr_key)
        else:
            out[k] = sorted(v)
    return out
