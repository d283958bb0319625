"""topodra's own discovery reads every synthetic tree as the machine that was declared."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from synth_cases import ALL, Built
from topodra.common.synth.plan import Plan
from topodra.common.synth.render_pci import link_speed
from topodra.common.topology import Topology, discover


@pytest.fixture(scope="module")
def discovered(synth_tree: Callable[[str], Built]) -> Callable[[str], tuple[Plan, Topology]]:
    cache: dict[str, tuple[Plan, Topology]] = {}

    def get(name: str) -> tuple[Plan, Topology]:
        if name not in cache:
            built = synth_tree(name)
            cache[name] = (built.plan, discover(built.root))
        return cache[name]

    return get


@pytest.mark.parametrize("name", ALL)
def test_no_warnings(name: str, discovered: Callable[[str], tuple[Plan, Topology]]) -> None:
    _plan, topo = discovered(name)
    assert topo.warnings == ()


@pytest.mark.parametrize("name", ALL)
def test_cpus_packages_cores_caches(name: str, discovered: Callable[[str], tuple[Plan, Topology]]) -> None:
    plan, topo = discovered(name)
    online = set(plan.online)
    l2_id = {c.id: plan.caches[c.caches[2]].id for c in plan.cpus}
    assert [(c.id, c.online, c.usable) for c in topo.cpus] == [(c.id, c.online, c.online) for c in plan.cpus]
    # an offline CPU has no topology/ folder: only usable CPUs carry placement
    placed = [
        (c.id, c.package_id, c.die_id, c.core_id, c.cluster_id, c.numa_node, c.core_type)
        for c in topo.cpus
        if c.usable
    ]
    assert placed == [
        (c.id, c.socket, c.die, c.core_id, l2_id[c.id], c.node, c.kind) for c in plan.cpus if c.online
    ]
    assert sorted((p.id, list(p.cpus)) for p in topo.packages) == sorted(
        (s, sorted(c.id for c in plan.cpus if c.socket == s and c.online))
        for s in {c.socket for c in plan.cpus if c.online}
    )
    cores = sorted(
        (topo.packages[k.package].id if k.package is not None else None, k.id, list(k.cpus))
        for k in topo.cores
    )
    assert cores == sorted(
        (k.socket, k.core_id, on) for k in plan.cores if (on := sorted(set(k.cpus) & online))
    )
    caches = sorted(
        (k.level, k.type, k.id, k.size_bytes, list(k.cpus), k.line_size, k.ways) for k in topo.caches
    )
    assert caches == sorted(
        (k.level, k.type.lower(), k.id, k.size_kib * 1024, on, 64, k.ways)
        for k in plan.caches
        if (on := sorted(set(k.cpus) & online))
    )


@pytest.mark.parametrize("name", ALL)
def test_numa_nodes(name: str, discovered: Callable[[str], tuple[Plan, Topology]]) -> None:
    plan, topo = discovered(name)
    online = set(plan.online)
    got = [(n.id, list(n.cpus), n.memory_bytes, list(n.distances)) for n in topo.numa_nodes]
    want = [
        (
            n.id,
            sorted(set(n.cpus) & online),
            n.memory_kib * 1024,
            [(m.id, d) for m, d in zip(plan.nodes, n.distances, strict=True)],
        )
        for n in plan.nodes
    ]
    assert got == want


@pytest.mark.parametrize("name", ALL)
def test_pci_functions(name: str, discovered: Callable[[str], tuple[Plan, Topology]]) -> None:
    plan, topo = discovered(name)
    got = {p.address: p for p in topo.pci_devices}
    assert list(got) == [f.bdf for f in plan.functions]
    for f in plan.functions:
        p = got[f.bdf]
        assert (p.class_code, p.vendor, p.device, p.subsystem_vendor, p.subsystem_device, p.revision) == (
            f.class_code,
            f.vendor,
            f.device,
            f.subsystem_vendor,
            f.subsystem_device,
            f.revision,
        ), f.bdf
        assert (p.numa_node, list(p.local_cpus), p.driver, p.iommu_group) == (
            f.numa_node,
            list(f.local_cpus),
            f.driver,
            f.iommu_group,
        ), f.bdf
        assert (p.pcie_root, p.root_bus, list(p.bridges), p.pcie_switch) == (
            f.root,
            f.root,
            list(f.bridges),
            f.pcie_switch,
        ), f.bdf
        assert p.sysfs_path == f.dir, f.bdf
        if f.link is None:  # conventional PCI, a VF's reserved link registers, an empty slot
            assert p.link is None or (p.link.current_speed, p.link.current_width) == (None, None), f.bdf
        else:
            assert p.link is not None, f.bdf
            assert (p.link.current_speed, p.link.current_width) == (link_speed(f.link), f.link.width), f.bdf
            assert f.max_link is not None
            assert (p.link.max_speed, p.link.max_width) == (link_speed(f.max_link), f.max_link.width), f.bdf
        if f.sriov_total or f.pf:
            assert p.sriov is not None, f.bdf
            assert (p.sriov.total_vfs, p.sriov.physfn, list(p.sriov.virtfns)) == (
                f.sriov_total or None,
                f.pf,
                f.vfs,
            ), f.bdf
            assert p.sriov.num_vfs == (len(f.vfs) if f.sriov_total else None), f.bdf
        nodes = sorted(n.name for n in p.device_nodes if n.kind in ("drm-card", "drm-render", "accel"))
        want = []
        if f.drm_card is not None:
            want.append(f"card{f.drm_card}")
        if f.drm_render is not None:
            want.append(f"renderD{f.drm_render}")
        if f.accel is not None:
            want.append(f"accel{f.accel}")
        assert nodes == sorted(want), f.bdf
    assert sorted((r.name, r.numa_node, list(r.cpus)) for r in topo.pcie_roots) == sorted(
        (name, node, list(cpus)) for name, node, cpus in plan.roots
    )


@pytest.mark.parametrize("name", ALL)
def test_net_and_rdma(name: str, discovered: Callable[[str], tuple[Plan, Topology]]) -> None:
    plan, topo = discovered(name)
    got = sorted(
        (n.name, n.pci_address, n.mac, n.mtu, n.speed_mbps, n.operstate, n.is_virtual, n.ifindex)
        for n in topo.net_interfaces
    )
    want = sorted(
        (
            n.name,
            n.function,
            n.address,
            n.mtu,
            n.speed if n.speed >= 0 else None,
            "unknown" if n.kind == "loopback" else ("up" if n.up and n.carrier else "down"),
            n.function is None,
            n.ifindex,
        )
        for n in plan.netdevs
    )
    assert got == want
    roles = {n.name: n.sriov_role for n in topo.net_interfaces if n.pci_address}
    by_bdf = {f.bdf: f for f in plan.functions}
    assert roles == {
        n.name: ("vf" if by_bdf[n.function].pf else "pf" if by_bdf[n.function].sriov_total else None)
        for n in plan.netdevs
        if n.function
    }
    rdma = sorted((r.name, r.pci_address, list(r.net_interfaces), r.node_guid) for r in topo.rdma_devices)
    assert rdma == sorted(
        (r.name, r.function, [r.netdev] if r.netdev else [], r.node_guid) for r in plan.rdma
    )
    uverbs = sorted(n.name for r in topo.rdma_devices for n in r.device_nodes if n.kind == "uverbs")
    assert uverbs == sorted(f"uverbs{r.uverbs}" for r in plan.rdma)
