"""hwloc, an independent reader of real machines, must read every synthetic tree as declared."""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synth_cases import ALL, Built, spec_of
from topodra.common.synth import Plan, SpecError, build, make_plan, parse_spec
from topodra.common.synth.spec import LinkSpec
from topodra.common.topology import discover

from tests.conftest import skip_or_fail
from tests.kit import hwloc
from tests.kit.hwloc import HwObj, HwTopology

pytestmark = pytest.mark.hwloc

CACHE_OBJECTS = {
    "L1Cache": (1, "Data"),
    "L1iCache": (1, "Instruction"),
    "L2Cache": (2, "Unified"),
    "L3Cache": (3, "Unified"),
}
OSDEV_GPU, OSDEV_NETWORK, OSDEV_OPENFABRICS = 1, 2, 3
LANE_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0}


def hwloc_of(built: Built) -> HwTopology:
    if not hwloc.available():
        skip_or_fail("lstopo-no-graphics (Debian hwloc) is not installed")
    xml, err = hwloc.run(built.root)
    # hwloc prints a boxed warning when the OS information contradicts itself
    assert "invalid information" not in err, err
    return hwloc.parse(xml)


@pytest.fixture(scope="module")
def hwloc_view(synth_tree: Callable[[str], Built]) -> Callable[[str], tuple[Built, HwTopology]]:
    cache: dict[str, tuple[Built, HwTopology]] = {}

    def get(name: str) -> tuple[Built, HwTopology]:
        if name not in cache:
            built = synth_tree(name)
            cache[name] = (built, hwloc_of(built))
        return cache[name]

    return get


def link_gbytes(link: LinkSpec) -> float:
    encoding = 0.8 if link.gen <= 2 else 128 / 130
    lanes: int = link.width
    return LANE_GTS[link.gen] * lanes * encoding / 8


def check_cpus(plan: Plan, topo: HwTopology, *, cpuinfo: bool = True) -> None:
    online = set(plan.online)
    assert {int(o.attrs["os_index"]) for o in topo.of("PU")} == online
    packages = sorted((int(p.attrs["os_index"]), p.cpuset) for p in topo.of("Package"))
    sockets = sorted({c.socket for c in plan.cpus if c.online})
    assert packages == [
        (s, frozenset(c.id for c in plan.cpus if c.socket == s and c.online)) for s in sockets
    ]
    cores = sorted(sorted(o.cpuset) for o in topo.of("Core"))
    assert cores == sorted(on for k in plan.cores if (on := sorted(set(k.cpus) & online)))
    caches = sorted(
        (*CACHE_OBJECTS[o.type], int(o.attrs["cache_size"]) // 1024, sorted(o.cpuset))
        for o in topo.objects
        if o.type in CACHE_OBJECTS
    )
    assert caches == sorted(
        (k.level, k.type, k.size_kib, on) for k in plan.caches if (on := sorted(set(k.cpus) & online))
    )
    for p in topo.of("Package"):
        assert p.infos.get("CPUModel") == (plan.spec.cpu.model_name if cpuinfo else None)  # from proc/cpuinfo


def check_numa(plan: Plan, topo: HwTopology) -> None:
    online = set(plan.online)
    nodes = {int(o.attrs["os_index"]): o for o in topo.of("NUMANode")}
    assert sorted(nodes) == [n.id for n in plan.nodes]
    for n in plan.nodes:
        o = nodes[n.id]
        assert int(o.attrs["local_memory"]) == n.memory_kib * 1024
        if set(n.cpus) & online:
            assert o.cpuset == set(n.cpus) & online, n.id
        else:
            # a node whose CPUs are all offline: hwloc places it near CPUs of its own socket, or nowhere
            assert o.cpuset <= {c.id for c in plan.cpus if c.socket == n.socket and c.online}, n.id
    if len(plan.nodes) > 1:
        indexes, values = topo.distances["NUMALatency"]
        assert indexes == [n.id for n in plan.nodes]
        assert values == [d for n in plan.nodes for d in n.distances]


@pytest.mark.parametrize("name", ALL)
def test_cpus_cores_caches_and_packages(
    name: str, hwloc_view: Callable[[str], tuple[Built, HwTopology]]
) -> None:
    built, topo = hwloc_view(name)
    check_cpus(built.plan, topo)
    assert len(topo.of("Package")) == built.spec.cpu.sockets


@pytest.mark.parametrize("name", ALL)
def test_numa_nodes_memory_and_distances(
    name: str, hwloc_view: Callable[[str], tuple[Built, HwTopology]]
) -> None:
    built, topo = hwloc_view(name)
    check_numa(built.plan, topo)
    assert len(topo.of("NUMANode")) == built.spec.cpu.sockets * built.spec.cpu.numa_nodes_per_socket


@st.composite
def cpu_specs(draw: st.DrawFn) -> dict[str, Any]:
    """CPU layouts within what real machines do: every grouping divides the socket evenly."""
    dies = draw(st.sampled_from([1, 2]))
    nodes = draw(st.sampled_from([1, 2, 4]))
    step = dies * nodes // math.gcd(dies, nodes)
    cores = step * draw(st.integers(1, 4))
    threads = draw(st.integers(1, 4))
    sockets = draw(st.integers(1, 3))
    total = sockets * cores * threads
    l2_cores = draw(st.sampled_from([d for d in (1, 2) if (cores // step) % d == 0 or d == 1]))
    offline = draw(st.sets(st.integers(0, total - 1), max_size=total - 1))
    return {
        "name": "random",
        "cpu": {
            "sockets": sockets,
            "dies_per_socket": dies,
            "numa_nodes_per_socket": nodes,
            "cores_per_socket": cores,
            "threads_per_core": threads,
            "smt_numbering": draw(st.sampled_from(["spread", "adjacent"])),
            "offline_cpus": sorted(offline),
            "caches": {
                "l2": {"size_kib": 1024, "cores": l2_cores},
                "l3": {"size_kib": 8192, "scope": draw(st.sampled_from(["socket", "die", "numa_node"]))},
            },
        },
    }


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=cpu_specs())
def test_random_cpu_layouts_read_back_as_declared(raw: dict[str, Any], synth_base: Path) -> None:
    if not hwloc.available():
        skip_or_fail("lstopo-no-graphics (Debian hwloc) is not installed")
    try:
        plan = make_plan(parse_spec(raw))
    except SpecError as exc:
        assert "overlap without one holding the other" in str(exc)
        return
    out = Path(tempfile.mkdtemp(dir=synth_base))
    try:
        build(plan.spec, out)
        topo = hwloc_of(Built(name="random", root=out, plan=plan))
        check_cpus(plan, topo)
        check_numa(plan, topo)
    finally:
        shutil.rmtree(out)


@pytest.mark.parametrize("name", ALL)
def test_pci_functions_bridges_and_locality(
    name: str, hwloc_view: Callable[[str], tuple[Built, HwTopology]]
) -> None:
    built, topo = hwloc_view(name)
    plan = built.plan
    pci = topo.pci()
    assert set(pci) == {f.bdf for f in plan.functions}
    for f in plan.functions:
        o = pci[f.bdf]
        cls, ids, subsys, rev = o.attrs["pci_type"].split()
        assert cls == f"{f.class_code >> 8:04x}", f.bdf
        assert ids == f"[{f.vendor:04x}:{f.device:04x}]", f.bdf
        assert subsys == f"[{f.subsystem_vendor:04x}:{f.subsystem_device:04x}]", f.bdf
        assert rev == f"{f.revision:02x}", f.bdf
        assert o.type == ("Bridge" if f.is_bridge else "PCIDev"), f.bdf
        if f.is_bridge:
            assert o.attrs["bridge_pci"] == f"{f.domain:04x}:[{f.secondary:02x}-{f.subordinate:02x}]", f.bdf
        chain = [a.attrs["pci_busid"] for a in reversed(o.ancestors()) if "pci_busid" in a.attrs]
        assert chain == list(f.bridges), f.bdf
        expected_speed = link_gbytes(f.link) if f.link is not None else 0.0
        assert float(o.attrs["pci_link_speed"]) == pytest.approx(expected_speed, rel=1e-4), f.bdf
        # the host bridge hangs below the object whose CPUs are the function's local CPUs
        host = next(a for a in o.ancestors() if a.type == "Bridge" and "pci_busid" not in a.attrs)
        assert host.parent is not None
        assert host.parent.cpuset == frozenset(f.local_cpus), f.bdf


def _osdevs(topo: HwTopology, kind: int) -> set[tuple[str, str]]:
    out = set()
    for o in topo.of("OSDev"):
        if int(o.attrs["osdev_type"]) == kind:
            assert o.parent is not None
            out.add((o.attrs["name"], o.parent.attrs.get("pci_busid", "")))
    return out


@pytest.mark.parametrize("name", ALL)
def test_os_devices(name: str, hwloc_view: Callable[[str], tuple[Built, HwTopology]]) -> None:
    built, topo = hwloc_view(name)
    plan = built.plan
    # hwloc skips interfaces under devices/virtual, so only the PCI ones are expected
    assert _osdevs(topo, OSDEV_NETWORK) == {(n.name, n.function) for n in plan.netdevs if n.function}
    assert _osdevs(topo, OSDEV_OPENFABRICS) == {(r.name, r.function) for r in plan.rdma}
    drm = set()
    for f in plan.functions:
        if f.drm_card is not None:
            drm.add((f"card{f.drm_card}", f.bdf))
        if f.drm_render is not None:
            drm.add((f"renderD{f.drm_render}", f.bdf))
    assert _osdevs(topo, OSDEV_GPU) == drm
    states = {
        o.attrs["name"]: o.infos.get("Port1State")
        for o in topo.of("OSDev")
        if int(o.attrs["osdev_type"]) == OSDEV_OPENFABRICS
    }
    assert states == {r.name: "4" if r.active else "1" for r in plan.rdma}
    addresses = {
        o.attrs["name"]: o.infos.get("Address")
        for o in topo.of("OSDev")
        if int(o.attrs["osdev_type"]) == OSDEV_NETWORK
    }
    assert addresses == {n.name: n.address for n in plan.netdevs if n.function}


def test_hybrid_core_kinds_by_frequency(hwloc_view: Callable[[str], tuple[Built, HwTopology]]) -> None:
    built, topo = hwloc_view("edge")
    kinds = {k["FrequencyMaxMHz"]: sorted(cpus) for cpus, k in topo.cpukinds}
    plan = built.plan
    assert kinds == {
        "5000": [c.id for c in plan.cpus if c.kind == "core" and c.online],
        "3800": [c.id for c in plan.cpus if c.kind == "atom" and c.online],
    }


def _pci_class(o: HwObj) -> str:
    return str(o.attrs["pci_type"].split()[0])


def test_each_gpu_shares_a_switch_with_exactly_one_nic(
    hwloc_view: Callable[[str], tuple[Built, HwTopology]],
) -> None:
    """The headline machine, as hwloc sees it: 8 GPUs, each alone with one NIC below a switch."""
    _built, topo = hwloc_view("2s-8acc-8nic")
    gpus = [o for o in topo.of("PCIDev") if _pci_class(o) == "0302"]
    assert len(gpus) == 8
    switches = set()
    for gpu in gpus:
        bridges = [a for a in reversed(gpu.ancestors()) if a.type == "Bridge" and "pci_busid" in a.attrs]
        assert len(bridges) == 3  # root port, switch upstream port, switch downstream port
        upstream = bridges[1]
        switches.add(upstream.attrs["pci_busid"])
        below = [o for o in topo.of("PCIDev") if upstream in o.ancestors()]
        assert sorted(_pci_class(o) for o in below) == ["0200", "0302"]
    assert len(switches) == 8
    per_package: dict[str, int] = {}
    for gpu in gpus:
        package = next(a for a in gpu.ancestors() if a.type == "Package")
        per_package[package.attrs["os_index"]] = per_package.get(package.attrs["os_index"], 0) + 1
    assert per_package == {"0": 4, "1": 4}


def test_nested_switches_leaf_and_outermost_switch_as_hwloc_sees_them(
    hwloc_view: Callable[[str], tuple[Built, HwTopology]],
) -> None:
    """Two levels of switches: hwloc's bridge chain above each GPU is root port, top switch up
    and down port, leaf switch up and down port. Discovery's pcieSwitch is the top switch's
    upstream port and pcieLeafSwitch the leaf's, under which hwloc finds exactly that GPU and
    one NIC; under the top switch, two GPUs and two NICs."""
    built, topo = hwloc_view("2s-8acc-8nic-pxb")
    ours = discover(built.root)
    gpus = [o for o in topo.of("PCIDev") if _pci_class(o) == "0302"]
    assert len(gpus) == 8
    leaves = set()
    for gpu in gpus:
        bridges = [a for a in reversed(gpu.ancestors()) if a.type == "Bridge" and "pci_busid" in a.attrs]
        assert len(bridges) == 5
        fn = ours.pci(gpu.attrs["pci_busid"])
        assert fn is not None
        assert fn.pcie_switch == bridges[1].attrs["pci_busid"]
        assert fn.pcie_leaf_switch == bridges[3].attrs["pci_busid"] != fn.pcie_switch
        leaves.add(fn.pcie_leaf_switch)
        under_leaf = [o for o in topo.of("PCIDev") if bridges[3] in o.ancestors()]
        assert sorted(_pci_class(o) for o in under_leaf) == ["0200", "0302"]
        under_top = [o for o in topo.of("PCIDev") if bridges[1] in o.ancestors()]
        assert sorted(_pci_class(o) for o in under_top) == ["0200", "0200", "0302", "0302"]
    assert len(leaves) == 8


def test_hwloc_needs_no_procfs(synth_base: Path) -> None:
    """Everything but the CPU model name comes from sys/: a tree without proc/ reads the same."""
    out = synth_base / "no-proc"
    plan = build(spec_of("edge"), out).plan
    shutil.rmtree(out / "proc")
    topo = hwloc_of(Built(name="no-proc", root=out, plan=plan))
    check_cpus(plan, topo, cpuinfo=False)
    check_numa(plan, topo)
    assert set(topo.pci()) == {f.bdf for f in plan.functions}
