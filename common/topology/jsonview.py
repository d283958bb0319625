"""The `topodra inspect --output json` document: plain dicts and lists from a Topology.

Keys the issue promises (cpus, packages, cores, numa_nodes, caches, pci_devices, net_interfaces,
warnings and their fields) never change meaning; extra keys may be added. `package` and `core`
are kernel ids as sysfs spells them (null when -1); `package_index`/`index` are the stable
positions, unique even where kernel ids repeat.
"""

from __future__ import annotations

import json

from topodra.common.topology.model import DeviceNode, PciFunction, Topology

# for annotations only (strings here): importing typing costs milliseconds on the inspect path
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _node(n: DeviceNode) -> dict[str, Any]:
    return {"kind": n.kind, "name": n.name, "path": n.dev_path, "major": n.major, "minor": n.minor}


def _pci(p: PciFunction) -> dict[str, Any]:
    sriov = None
    if p.sriov is not None:
        sriov = {
            "role": p.sriov.role,
            "total_vfs": p.sriov.total_vfs,
            "num_vfs": p.sriov.num_vfs,
            "physfn": p.sriov.physfn,
            "virtfns": list(p.sriov.virtfns),
        }
    link = None
    if p.link is not None:
        link = {
            "current_speed": p.link.current_speed,
            "current_width": p.link.current_width,
            "max_speed": p.link.max_speed,
            "max_width": p.link.max_width,
        }
    return {
        "address": p.address,
        "class": p.class_hex,
        "vendor": p.vendor_hex,
        "device": p.device_hex,
        "subsystem_vendor": None if p.subsystem_vendor is None else f"0x{p.subsystem_vendor:04x}",
        "subsystem_device": None if p.subsystem_device is None else f"0x{p.subsystem_device:04x}",
        "numa_node": p.numa_node,
        "pcie_root": p.pcie_root,
        "root_bus": p.root_bus,
        "bridges": None if p.bridges is None else list(p.bridges),
        "pcie_switch": p.pcie_switch,
        "pcie_leaf_switch": p.pcie_leaf_switch,
        "local_cpus": list(p.local_cpus),
        "driver": p.driver,
        "iommu_group": p.iommu_group,
        "sriov": sriov,
        "link": link,
        "aer_fatal_total": p.aer_fatal_total,
        "device_nodes": [_node(n) for n in p.device_nodes],
    }


def to_json(t: Topology) -> dict[str, Any]:
    pkg_id = [p.id for p in t.packages]
    return {
        "cpus": [
            {
                "id": c.id,
                "online": c.online,
                "usable": c.usable,
                "package": None if c.package is None else pkg_id[c.package],
                "package_index": c.package,
                "core": c.core_id if c.core is not None else None,
                "core_index": c.core,
                "die": c.die_id,
                "cluster": c.cluster_id,
                "numa_node": c.numa_node,
                "core_type": c.core_type,
            }
            for c in t.cpus
        ],
        "packages": [{"id": p.id, "index": p.index, "cpus": list(p.cpus)} for p in t.packages],
        "cores": [
            {
                "package": None if c.package is None else pkg_id[c.package],
                "package_index": c.package,
                "id": c.id,
                "index": c.index,
                "cpus": list(c.cpus),
                "core_type": c.core_type,
            }
            for c in t.cores
        ],
        "numa_nodes": [
            {
                "id": n.id,
                "cpus": list(n.cpus),
                "memory_bytes": n.memory_bytes,
                "distances": {str(node): d for node, d in n.distances},
            }
            for n in t.numa_nodes
        ],
        "caches": [
            {
                "level": c.level,
                "type": c.type,
                "id": c.id,
                "size_bytes": c.size_bytes,
                "cpus": list(c.cpus),
                "line_size": c.line_size,
                "ways": c.ways,
            }
            for c in t.caches
        ],
        "pci_devices": [_pci(p) for p in t.pci_devices],
        "pcie_roots": [
            {"name": r.name, "cpus": list(r.cpus), "numa_node": r.numa_node} for r in t.pcie_roots
        ],
        "net_interfaces": [
            {
                "name": i.name,
                "pci_address": i.pci_address,
                "mac": i.mac,
                "mtu": i.mtu,
                "speed_mbps": i.speed_mbps,
                "operstate": i.operstate,
                "carrier": i.carrier,
                "rdma_devices": list(i.rdma_devices),
                "sriov_role": i.sriov_role,
                "virtual": i.is_virtual,
                "master": i.master,
                "uppers": list(i.uppers),
            }
            for i in t.net_interfaces
        ],
        "rdma_devices": [
            {
                "name": d.name,
                "pci_address": d.pci_address,
                "net_interfaces": list(d.net_interfaces),
                "device_nodes": [_node(n) for n in d.device_nodes],
            }
            for d in t.rdma_devices
        ],
        "warnings": [str(w) for w in t.warnings],
    }


def dumps(doc: dict[str, Any]) -> str:
    """The document with one top-level key, and one list item, per line.

    Readable with grep and diff, yet every piece goes through json's C encoder: `indent=` would
    switch to the pure-Python encoder, which costs more than discovery itself on big machines.
    """
    enc = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": ")).encode
    parts = []
    for key, value in doc.items():
        if isinstance(value, list) and value:
            items = ",\n  ".join(enc(v) for v in value)
            parts.append(f"{enc(key)}: [\n  {items}\n ]")
        else:
            parts.append(f"{enc(key)}: {enc(value)}")
    return "{\n " + ",\n ".join(parts) + "\n}\n"
