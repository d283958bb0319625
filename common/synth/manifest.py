"""The plan as JSON: what a correct reader must find in the generated tree.

Written beside `sys/` as `synth-manifest.json`, so a driver's test can check its slices against
the declared machine without re-deriving addresses; shaped like the shared fixtures'
expected.json where the two overlap (CPU lists, packages, NUMA, caches, PCI, net).
"""

from __future__ import annotations

from typing import Any

from topodra.common.synth.devnodes import device_nodes
from topodra.common.synth.plan import Plan

MANIFEST = "synth-manifest.json"


def leaf_switch(plan: Plan, bridges: tuple[str, ...]) -> str | None:
    """The upstream port of the innermost switch above a function, from the roles the plan gave
    its bridges (not from discovery's position rule, which this checks)."""
    return next((b for b in reversed(bridges) if plan.function(b).role == "switch_upstream"), None)


def manifest(plan: Plan) -> dict[str, Any]:
    online = set(plan.online)
    packages: dict[int, list[int]] = {}
    for c in plan.cpus:
        if c.online:
            packages.setdefault(c.socket, []).append(c.id)
    return {
        "name": plan.spec.name,
        "hostname": plan.spec.hostname,
        "cpus": sorted(online),
        "complete_cpus": [c.id for c in plan.cpus],
        "cpu_details": [
            {
                "id": c.id,
                "online": c.online,
                "package": c.socket,
                "die": c.die,
                "core_id": c.core_id,
                "numa_node": c.node,
                "thread": c.thread,
                "core_type": c.kind,
            }
            for c in plan.cpus
        ],
        "packages": [{"id": s, "cpus": cpus} for s, cpus in sorted(packages.items())],
        "cores": [
            {"package": k.socket, "core_id": k.core_id, "numa_node": k.node, "type": k.kind, "cpus": on}
            for k in plan.cores
            if (on := [c for c in k.cpus if c in online])
        ],
        "numa": [
            {
                "id": n.id,
                "package": n.socket,
                "cpus": [c for c in n.cpus if c in online],
                "memory_kb": n.memory_kib,
                "distances": list(n.distances),
            }
            for n in plan.nodes
        ],
        "caches": [
            {"level": k.level, "type": k.type, "id": k.id, "size_kb": k.size_kib, "cpus": on}
            for k in plan.caches
            if (on := [c for c in k.cpus if c in online])
        ],
        "pci": [
            {
                "bdf": f.bdf,
                "role": f.role,
                "kind": f.kind,
                "class": f"{f.class_code >> 8:04x}",
                "vendor": f"{f.vendor:04x}",
                "device": f"{f.device:04x}",
                "subvendor": f"{f.subsystem_vendor:04x}",
                "subdevice": f"{f.subsystem_device:04x}",
                "numa": f.numa_node,
                "local_cpus": list(f.local_cpus),
                "root": f.root,
                "bridges": list(f.bridges),
                "pcie_switch": f.pcie_switch,
                "pcie_leaf_switch": leaf_switch(plan, f.bridges),
                "driver": f.driver,
                "iommu_group": f.iommu_group,
                "link": {"gen": f.link.gen, "width": f.link.width} if f.link else None,
                "secondary_bus": f.secondary,
                "subordinate_bus": f.subordinate,
                "physfn": f.pf,
                "virtfns": list(f.vfs),
                "sriov_totalvfs": f.sriov_total or None,
                "netdevs": list(f.netdevs),
                "rdma": f.rdma,
                "drm": [n for n in (_card(f.drm_card), _render(f.drm_render)) if n],
                "accel": f"accel{f.accel}" if f.accel is not None else None,
            }
            for f in plan.functions
        ],
        "net": [
            {
                "name": n.name,
                "pci": n.function,
                "kind": n.kind,
                "ifindex": n.ifindex,
                "mac": n.address,
                "mtu": n.mtu,
                "speed_mbps": n.speed if n.speed >= 0 else None,
                "operstate": "unknown" if n.kind == "loopback" else ("up" if n.up and n.carrier else "down"),
                "uplink": n.uplink,
            }
            for n in plan.netdevs
        ],
        "rdma": [
            {
                "name": r.name,
                "pci": r.function,
                "uverbs": f"uverbs{r.uverbs}",
                "netdev": r.netdev,
                "link_layer": r.link_layer,
            }
            for r in plan.rdma
        ],
        "uplink": plan.uplink.name if plan.uplink else None,
        "device_nodes": [
            {"path": n.path, "pci": n.pci, "dev": f"{n.major}:{n.minor}"} for n in device_nodes(plan)
        ],
    }


def _card(n: int | None) -> str | None:
    return f"card{n}" if n is not None else None


def _render(n: int | None) -> str | None:
    return f"renderD{n}" if n is not None else None
