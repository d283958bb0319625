"""Slices of the CPU driver for every captured and every synthetic machine are valid and true.

Valid: the publisher's validation leaves nothing out and the Kubernetes API schema (strict)
accepts every slice. True: devices, capacities, numaNode, socket, SMT and L3 values equal what
the machine's independent description (expected.json checked against hwloc, or the synthetic
machine's manifest) says, and list-form numaNode equals the upstream rule
(docs/design/resourceslices.md) computed from the raw sysfs files.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from topodra.common.topology import discover
from topodra.drivers.cpu import devices as layout
from topodra.drivers.cpu.devices import build_devices
from topodra.drivers.cpu.options import CpuOptions

from tests.conftest import FixtureTrees, fixture_names
from tests.drivers.cpu.truth import check_machine, check_valid, load

MODES = {
    "numa": CpuOptions(),
    "numa-lists": CpuOptions(list_attributes=True),
    "core": CpuOptions(granularity="core"),
    "core-lists": CpuOptions(granularity="core", list_attributes=True),
}


def reserving_first_two(root: Path, options: CpuOptions) -> CpuOptions:
    usable = discover(root).usable_cpus()
    return CpuOptions(
        granularity=options.granularity,
        list_attributes=options.list_attributes,
        reserved=frozenset(usable[:2]),
    )


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("name", fixture_names())
def test_fixture_slices_are_valid_and_true(fixture_trees: FixtureTrees, name: str, mode: str) -> None:
    root = fixture_trees.root(name)
    desc = load(fixture_trees.expected(name))
    for options in (MODES[mode], reserving_first_two(root, MODES[mode])):
        topo = discover(root)
        devs = build_devices(topo, options)
        assert bool(devs) == bool(set(topo.usable_cpus()) - options.reserved)
        check_machine(root, desc, devs, options)
        check_valid(devs, options)


def synth_names() -> list[str]:
    try:
        from topodra.common.synth import shipped_spec_names
    except ImportError:
        return []
    return list(shipped_spec_names())


@pytest.fixture(scope="module")
def synth_root(tmp_path_factory: pytest.TempPathFactory) -> object:
    from topodra.common.synth import build, load_spec

    made: dict[str, Path] = {}

    def root(name: str) -> Path:
        if name not in made:
            out = tmp_path_factory.mktemp(f"synth-{name}")
            build(load_spec(name), out, force=True)
            made[name] = out
        return made[name]

    return root


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("name", synth_names())
def test_synthetic_slices_are_valid_and_true(synth_root: object, name: str, mode: str) -> None:
    root: Path = synth_root(name)  # type: ignore[operator]
    desc = load(root / "synth-manifest.json")
    for options in (MODES[mode], reserving_first_two(root, MODES[mode])):
        devs = build_devices(discover(root), options)
        check_machine(root, desc, devs, options)
        check_valid(devs, options)


def test_reserved_cpus_are_never_published(fixture_trees: FixtureTrees) -> None:
    root = fixture_trees.root("hwloc--32intel64-2p8co2t+8ve")
    topo = discover(root)
    full = {d.name: d for d in build_devices(topo, CpuOptions())}
    options = CpuOptions(reserved=frozenset({0, 16}))  # one whole core of node 0
    less = {d.name: d for d in build_devices(topo, options)}
    assert full["numa-0"].capacity[layout.CAPACITY].value == "16"
    assert less["numa-0"].capacity[layout.CAPACITY].value == "14"
    assert less["numa-1"] == full["numa-1"]
    cores = {d.name for d in build_devices(topo, CpuOptions(granularity="core", reserved=options.reserved))}
    all_cores = {d.name for d in build_devices(topo, CpuOptions(granularity="core"))}
    assert all_cores - cores == {"core-0-0"}


def test_core_names_follow_kernel_ids(fixture_trees: FixtureTrees) -> None:
    core = CpuOptions(granularity="core")
    # unique core ids per package: core-<package index>-<core id>
    names = [
        d.name for d in build_devices(discover(fixture_trees.root("hwloc--32intel64-2p8co2t+8ve")), core)
    ]
    assert names[:3] == ["core-0-0", "core-0-1", "core-0-2"] and len(names) == 16
    # ids repeat inside a package (two dies, no die ids): named after the lowest CPU instead
    names = [
        d.name for d in build_devices(discover(fixture_trees.root("hwloc--48amd64-4pa2n6c-sparse")), core)
    ]
    assert names[:2] == ["core-0-cpu0", "core-0-cpu1"] and len(set(names)) == 48
    # CPUs without any core information are cores of their own
    names = [d.name for d in build_devices(discover(fixture_trees.root("hwloc--4fake-4gr1nu1pu")), core)]
    assert names == ["core-0-cpu0", "core-0-cpu1", "core-0-cpu2", "core-0-cpu3"]


def test_sparse_numa_ids_name_devices(fixture_trees: FixtureTrees) -> None:
    devs = build_devices(discover(fixture_trees.root("hwloc--48amd64-4pa2n6c-sparse")), CpuOptions())
    assert [d.name for d in devs] == [f"numa-{n}" for n in (0, 1, 2, 33, 34, 45, 72, 73)]


def test_cpus_outside_any_node_get_a_socket_device(fixture_trees: FixtureTrees) -> None:
    # node0 is hidden (its CPUs offline); package 0's online CPUs are in no node's cpumap
    topo = discover(fixture_trees.root("hwloc--offline-cpu0-node0"))
    devs = {d.name: d for d in build_devices(topo, CpuOptions())}
    assert sorted(devs) == ["numa-1", "socket-0"]
    assert layout.NUMA_NODE not in devs["socket-0"].attributes
    assert devs["socket-0"].attributes[layout.SOCKET] == 0
    assert devs["socket-0"].capacity[layout.CAPACITY].value == "9"  # CPUs 4,6,...,20


def test_list_form_numa_on_snc(fixture_trees: FixtureTrees) -> None:
    # SNC-4: each CPU node's nearest nodes are the other three of its socket; MCDRAM nodes 4-7
    # sit further away and are not listed
    devs = build_devices(
        discover(fixture_trees.root("hwloc--64intel64-fakeKNL-SNC4-hybrid")), CpuOptions(list_attributes=True)
    )
    got = {d.name: d.attributes[layout.NUMA_NODE] for d in devs}
    assert got == {
        "numa-0": (0, 1, 2, 3),
        "numa-1": (1, 0, 2, 3),
        "numa-2": (2, 0, 1, 3),
        "numa-3": (3, 0, 1, 2),
    }


def test_pcie_roots_listed_for_local_groups(fixture_trees: FixtureTrees) -> None:
    topo = discover(fixture_trees.root("hwloc--32intel64-2p8co2t+8ve"))
    devs = {d.name: d for d in build_devices(topo, CpuOptions(list_attributes=True))}
    assert devs["numa-0"].attributes[layout.PCIE_ROOT] == ("pci0000:17", "pci0000:3a", "pci0000:5d")
    assert layout.PCIE_ROOT not in devs["numa-1"].attributes
    scalar = {d.name: d for d in build_devices(topo, CpuOptions())}
    assert layout.PCIE_ROOT not in scalar["numa-0"].attributes  # only with --cpu-list-attributes


def test_hybrid_core_types(fixture_trees: FixtureTrees, tmp_path: Path) -> None:
    # The captured hybrid tree lacks the cpu_core/cpu_atom PMU folders; add them as a 12th-gen
    # Intel kernel has them (P-cores 0-11 with SMT, E-cores 12-19) in a copy of the tree.
    import shutil

    root = tmp_path / "hybrid"
    shutil.copytree(fixture_trees.root("hwloc--20em64t-hybrid-1p6c2t+2ca4co1t"), root, symlinks=True)
    for kind, cpus in (("core", "0-11"), ("atom", "12-19")):
        (root / f"sys/devices/cpu_{kind}").mkdir(parents=True)
        (root / f"sys/devices/cpu_{kind}/cpus").write_text(cpus + "\n")
    topo = discover(root)
    (numa,) = build_devices(topo, CpuOptions())
    assert numa.attributes[layout.CORE_TYPE] == "mixed"
    (numa,) = build_devices(topo, CpuOptions(list_attributes=True))
    assert numa.attributes[layout.CORE_TYPE] == ("atom", "core")
    cores = build_devices(topo, CpuOptions(granularity="core"))
    types = [d.attributes[layout.CORE_TYPE] for d in cores]
    assert types == ["core"] * 6 + ["atom"] * 8
    assert [d.attributes[layout.CPU_COUNT] for d in cores] == [2] * 6 + [1] * 8
