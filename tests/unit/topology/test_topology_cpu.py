"""CPU, package, core, cache and NUMA discovery on small hand-made trees, one trap per test."""

from __future__ import annotations

from pathlib import Path

import pytest
from topodra.common.topology import NotASysfsTree, discover
from topodra.common.topology.model import Cache, Cpu, NumaNode, Topology

from tests.kit.sysfs import CPU, NODE, Tree, basic_machine, mask


def cpu(t: Topology, n: int) -> Cpu:
    c = t.cpu(n)
    assert c is not None, f"cpu{n} not discovered"
    return c


def node(t: Topology, n: int) -> NumaNode:
    x = t.numa_node(n)
    assert x is not None, f"node{n} not discovered"
    return x


def cache(t: Topology, n: int, level: int) -> Cache:
    c = t.cache_of_cpu(n, level)
    assert c is not None, f"no L{level} for cpu{n}"
    return c


def warned(t: Topology, path_part: str) -> bool:
    return any(path_part in w.path for w in t.warnings)


def test_basic_machine_groups_by_masks(tmp_path: Path) -> None:
    basic_machine(tmp_path, cpus=8, packages=2, threads=2)
    t = discover(tmp_path)
    assert t.usable_cpus() == tuple(range(8))
    assert [p.cpus for p in t.packages] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [c.cpus for c in t.cores] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert [c.package for c in t.cores] == [0, 0, 1, 1]
    assert [c.cpus for c in t.l3_groups()] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert t.smt_siblings(5) == (4, 5)
    assert cache(t, 3, 2).cpus == (2, 3)
    assert len(t.caches_at(1)) == 8  # data + instruction per core
    assert t.numa_of_cpu(6) == 1
    assert t.package_of_numa(1) == t.packages[1]
    assert t.distance(0, 1) == 21 and t.distance(1, 1) == 10
    assert t.warnings == ()


def test_offline_cpus_are_not_usable_and_leave_every_group(tmp_path: Path) -> None:
    t0 = basic_machine(tmp_path, cpus=4, threads=2)
    t0.file(f"{CPU}/cpu3/online", "0")
    t = discover(tmp_path)
    assert t.usable_cpus() == (0, 1, 2)
    assert [c.id for c in t.cpus] == [0, 1, 2, 3]
    cpu3 = t.cpu(3)
    assert cpu3 is not None and not cpu3.online and cpu3.package is None and cpu3.core is None
    assert t.packages[0].cpus == (0, 1, 2)
    assert [c.cpus for c in t.cores] == [(0, 1), (2,)]
    assert t.numa_nodes[0].cpus == (0, 1, 2) and t.numa_nodes[0].all_cpus == (0, 1, 2, 3)
    assert all(3 not in c.cpus for c in t.caches)


def test_global_online_list_when_cpus_have_no_online_file(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    for n in range(4):
        tree.cpu(n, package=0, core=n, package_cpus=range(4), core_cpus=[n], online=None)
    tree.file(f"{CPU}/online", "0-1,3")
    t = discover(tmp_path)
    assert t.usable_cpus() == (0, 1, 3)
    assert t.packages[0].cpus == (0, 1, 3)


def test_cpu0_offline_and_cpu_without_topology(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.mkdir(f"{CPU}/cpu0").file(f"{CPU}/cpu0/online", "0")  # offline: the kernel drops topology/
    tree.cpu(1, package=0, core=0, package_cpus=[1, 2], core_cpus=[1])
    tree.cpu(2, package=0, core=1, package_cpus=[1, 2], core_cpus=[2])
    tree.mkdir(f"{CPU}/cpu3")  # present, online, but no topology/: not usable
    t = discover(tmp_path)
    assert [c.id for c in t.cpus] == [0, 1, 2, 3]
    assert t.usable_cpus() == (1, 2)
    assert t.packages[0].cpus == (1, 2)
    assert t.cpu(3) is not None and cpu(t, 3).online and not cpu(t, 3).usable


def test_sparse_cpu_and_node_ids(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    for n in (0, 64, 255):
        tree.cpu(n, package=0, core=n, package_cpus=[0, 64, 255], core_cpus=[n])
    tree.node(0, [0]).node(128, [64, 255], mem_kb=2048)
    t = discover(tmp_path)
    assert t.usable_cpus() == (0, 64, 255)
    assert [n.id for n in t.numa_nodes] == [0, 128]
    assert t.cpus_of_numa(128) == (64, 255)
    assert node(t, 128).memory_bytes == 2048 * 1024


def test_package_id_minus_one_and_repeating_ids_grouped_by_masks(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    for n in range(4):
        pkg = [0, 1] if n < 2 else [2, 3]
        tree.cpu(n, package=-1, core=0, package_cpus=pkg, core_cpus=[n])  # core_id 0 repeats too
    t = discover(tmp_path)
    assert [(p.index, p.id, p.cpus) for p in t.packages] == [(0, None, (0, 1)), (1, None, (2, 3))]
    assert [c.cpus for c in t.cores] == [(0,), (1,), (2,), (3,)]
    assert {c.id for c in t.cores} == {0}
    assert t.package_of_cpu(3) == t.packages[1]


def test_core_id_repeating_across_dies(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    for n in range(4):
        tree.cpu(n, package=0, core=n % 2, die=n // 2, package_cpus=range(4), core_cpus=[n])
    t = discover(tmp_path)
    assert len(t.cores) == 4
    assert [c.die_id for c in t.cpus] == [0, 0, 1, 1]


def test_inconsistent_sibling_masks_give_disjoint_nested_groups(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    # cpu0 claims {0,1,2}; cpu1 claims only itself; cpu2 claims {2,3}; cpu3 claims {3} and 7 (absent)
    tree.cpu(0, package=0, core=0, package_cpus=[0, 1, 2], core_cpus=[0, 1])
    tree.cpu(1, package=0, core=0, package_cpus=[1], core_cpus=[1])
    tree.cpu(2, package=1, core=0, package_cpus=[2, 3], core_cpus=[2, 3])
    tree.cpu(3, package=1, core=1, package_cpus=[3, 7], core_cpus=[3])
    t = discover(tmp_path)
    seen: list[int] = []
    for p in t.packages:
        seen += p.cpus
    assert sorted(seen) == [0, 1, 2, 3]  # every usable CPU in exactly one package
    core_cpus = [c for core in t.cores for c in core.cpus]
    assert sorted(core_cpus) == [0, 1, 2, 3]  # and in exactly one core
    for core in t.cores:
        assert core.package is not None
        assert set(core.cpus) <= set(t.packages[core.package].cpus)  # cores nest in packages


def test_old_kernel_names(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    for n in range(4):
        first = n - n % 2
        tree.cpu(
            n, package=0, core=n // 2, package_cpus=range(4), core_cpus=[first, first + 1], old_names=True
        )
    t = discover(tmp_path)
    assert [c.cpus for c in t.cores] == [(0, 1), (2, 3)]
    assert t.packages[0].cpus == (0, 1, 2, 3)


def test_no_masks_means_no_package_and_no_core(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    for n in range(2):
        tree.cpu(n, package=0, core=None, package_cpus=None, core_cpus=None)
    t = discover(tmp_path)
    assert t.usable_cpus() == (0, 1)
    assert t.packages == () and t.cores == ()


def test_amd_compute_units_split_siblings_with_different_core_ids(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    for n in range(4):
        first = n - n % 2
        tree.cpu(n, package=0, core=n, package_cpus=range(4), core_cpus=[first, first + 1])
    t = discover(tmp_path)
    assert [c.cpus for c in t.cores] == [(0, 1), (2, 3)]  # no cpuinfo: masks are SMT siblings
    tree.file("proc/cpuinfo", "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 21\nmodel\t\t: 2\n")
    t = discover(tmp_path)
    assert [c.cpus for c in t.cores] == [(0,), (1,), (2,), (3,)]  # family 15h: one core per thread
    tree.file("proc/cpuinfo", "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 23\n")
    assert len(discover(tmp_path).cores) == 2  # Zen has real SMT


def test_hybrid_core_types(tmp_path: Path) -> None:
    basic_machine(tmp_path, cpus=4)
    Tree(tmp_path).file("sys/devices/cpu_core/cpus", "0-1").file("sys/devices/cpu_atom/cpus", "2-3")
    t = discover(tmp_path)
    assert [t.core_type(n) for n in range(4)] == ["core", "core", "atom", "atom"]
    assert [c.core_type for c in t.cores] == ["core", "core", "atom", "atom"]


def test_empty_shared_cpu_map_means_the_core_and_missing_cache_id(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    for n in range(4):
        first = n - n % 2
        tree.cpu(n, package=0, core=n // 2, package_cpus=range(4), core_cpus=[first, first + 1])
        tree.cache(n, 0, level=2, type_="Unified", size="256K", shared=None)  # empty map, no id file
        tree.cache(n, 1, level=3, type_="Unified", size="8M", shared=range(4))
    t = discover(tmp_path)
    l2 = t.caches_at(2)
    assert [c.cpus for c in l2] == [(0, 1), (2, 3)]
    assert all(c.id is None for c in l2)
    assert t.caches_at(3)[0].size_bytes == 8 << 20
    assert t.warnings == ()


def test_trailing_nul_bytes_are_padding(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path, cpus=2)
    tree.file(f"{CPU}/cpu1/topology/core_id", b"1\n\x00")
    tree.file(f"{NODE}/node0/cpumap", b"00000003\n\x00\x00")
    t = discover(tmp_path)
    assert cpu(t, 1).core_id == 1
    assert t.numa_nodes[0].cpus == (0, 1)
    assert t.warnings == ()


@pytest.mark.parametrize(
    ("rel", "content"),
    [
        (f"{CPU}/cpu1/online", "yes"),
        (f"{CPU}/cpu1/topology/core_id", "x1"),
        (f"{CPU}/cpu1/topology/package_cpus", "zz,00000003"),
        (f"{CPU}/cpu1/cache/index2/size", "lots"),
        (f"{CPU}/cpu1/cache/index2/type", "Weird"),
        (f"{NODE}/node0/meminfo", "Node 0 MemTotal: many kB"),
        (f"{NODE}/node0/distance", "10 ten"),
        # a hostile capture: past 4300 digits int() raises; a million-CPU list or mask must be
        # refused before it is expanded
        (f"{CPU}/cpu1/topology/physical_package_id", "7" * 5000),
        ("sys/devices/cpu_core/cpus", "0-1048576"),
        ("sys/devices/cpu_atom/cpus", ",".join(["0-65535"] * 2)),
        (f"{NODE}/node0/cpumap", "f" * 20000),
    ],
)
def test_garbage_becomes_none_and_a_warning_naming_the_file(tmp_path: Path, rel: str, content: str) -> None:
    basic_machine(tmp_path, cpus=2)
    Tree(tmp_path).file(rel, content)
    t = discover(tmp_path)
    assert any(w.path == rel for w in t.warnings), t.warnings
    assert t.usable_cpus()  # the rest of the machine is still there


def test_missing_physical_package_id_is_a_warning(tmp_path: Path) -> None:
    basic_machine(tmp_path, cpus=2)
    (tmp_path / CPU / "cpu1/topology/physical_package_id").unlink()
    t = discover(tmp_path)
    assert cpu(t, 1).package_id is None
    assert warned(t, "cpu1/topology/physical_package_id")
    assert t.packages[0].cpus == (0, 1)  # the mask still groups it


def test_numa_cpu_less_memory_less_and_overlapping_nodes(tmp_path: Path) -> None:
    tree = Tree(tmp_path).simple_cpus(4)
    tree.node(0, [0, 1, 2, 3], distance="10 20 20 20")
    tree.node(1, [2, 3], distance="20 10 20 20")  # buggy firmware: overlaps node 0
    tree.node(2, [], mem_kb=4096, distance="20 20 10 20")  # memory only
    tree.node(3, [], mem_kb=0, distance="20 20 20 10")  # neither
    t = discover(tmp_path)
    assert [(n.id, n.cpus) for n in t.numa_nodes] == [(0, (0, 1, 2, 3)), (1, (2, 3)), (2, ()), (3, ())]
    assert node(t, 3).memory_bytes == 0
    assert t.numa_of_cpu(3) == 0  # lowest node wins
    assert t.package_of_numa(2) is None  # CPU-less
    assert t.distance(2, 0) == 20


def test_node_folder_without_cpumap_is_ignored_with_a_warning(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path, cpus=2)
    tree.file(f"{NODE}/node1/vmstat", "nr_free_pages 0")
    t = discover(tmp_path)
    assert [n.id for n in t.numa_nodes] == [0]
    assert warned(t, "node1/cpumap")


def test_no_node_folder_means_no_numa_nodes(tmp_path: Path) -> None:
    Tree(tmp_path).simple_cpus(2)
    t = discover(tmp_path)
    assert t.numa_nodes == ()
    assert cpu(t, 0).numa_node is None


def test_distance_row_of_a_hidden_node_maps_through_the_online_list(tmp_path: Path) -> None:
    tree = Tree(tmp_path).simple_cpus(2)
    tree.node(1, [0, 1], distance="21 10")
    tree.file(f"{NODE}/online", "0-1")
    t = discover(tmp_path)
    assert t.numa_nodes[0].distances == ((0, 21), (1, 10))


def test_cpu_list_files_are_used_when_masks_are_absent(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    for n in range(2):
        tree.mkdir(f"{CPU}/cpu{n}/topology")
        tree.file(f"{CPU}/cpu{n}/topology/physical_package_id", "0")
        tree.file(f"{CPU}/cpu{n}/topology/package_cpus_list", "0-1")
        tree.file(f"{CPU}/cpu{n}/topology/core_cpus_list", str(n))
    tree.file(f"{NODE}/node0/cpulist", "0-1")
    t = discover(tmp_path)
    assert t.packages[0].cpus == (0, 1) and len(t.cores) == 2 and t.numa_nodes[0].cpus == (0, 1)


def test_wide_masks(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    cpus = [0, 100, 200]
    for n in cpus:
        tree.cpu(n, package=0, core=n, package_cpus=cpus, core_cpus=[n])
        tree.file(f"{CPU}/cpu{n}/topology/package_cpus", mask(cpus, words=8))
    assert discover(tmp_path).packages[0].cpus == (0, 100, 200)


def test_not_a_sysfs_tree(tmp_path: Path) -> None:
    with pytest.raises(NotASysfsTree, match="no sys/devices/system/cpu"):
        discover(tmp_path)


def test_a_fifo_where_a_file_should_be_does_not_hang(tmp_path: Path) -> None:
    import os

    basic_machine(tmp_path, cpus=2)
    fifo = tmp_path / CPU / "cpu1/topology/core_id"
    fifo.unlink()
    os.mkfifo(fifo)
    t = discover(tmp_path)
    assert cpu(t, 1).core_id is None
    assert t.packages[0].cpus == (0, 1)


# --- the kernel contradicting itself: groups still partition the CPUs, with a warning -------------


def _packages(t: Topology) -> list[tuple[int | None, tuple[int, ...]]]:
    return [(p.id, p.cpus) for p in t.packages]


def test_a_package_mask_contradicting_its_id_and_its_siblings_is_overruled_by_the_id(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path, cpus=8, packages=2)
    # cpu0's mask says {0,1}; its list file, its id and CPUs 1-3 (masks and ids) say {0-3}
    tree.file(f"{CPU}/cpu0/topology/package_cpus", mask([0, 1]))
    tree.file(f"{CPU}/cpu0/topology/package_cpus_list", "0-3")
    t = discover(tmp_path)
    assert _packages(t) == [(0, (0, 1, 2, 3)), (1, (4, 5, 6, 7))]  # was (0,(0,1)), (0,(2,3)), (1,...)
    assert [t.package_of_cpu(n).index for n in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]  # type: ignore[union-attr]
    (w,) = [w for w in t.warnings if "package masks contradict" in w.message]
    assert w.path == f"{CPU}/cpu0/topology"
    assert "cpu0 names 0-1" in w.message and "CPUs 0-3 grouped by physical_package_id" in w.message
    for core in t.cores:  # cores still nest in their package
        assert core.package is not None and set(core.cpus) <= set(t.packages[core.package].cpus)


def test_contradicting_masks_without_ids_fall_back_on_the_lowest_cpu(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    for n in range(4):
        tree.cpu(n, package=-1, core=n, package_cpus=[0, 1] if n == 0 else range(4), core_cpus=[n])
    t = discover(tmp_path)
    assert _packages(t) == [(None, (0, 1)), (None, (2, 3))]
    assert any("the lowest CPU whose mask names it" in w.message for w in t.warnings), t.warnings


def test_one_package_id_on_two_packages_whose_masks_agree_is_kept_once(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    for n in range(4):
        tree.cpu(n, package=0, core=n, package_cpus=[0, 1] if n < 2 else [2, 3], core_cpus=[n])
    t = discover(tmp_path)
    assert _packages(t) == [(0, (0, 1)), (None, (2, 3))]  # unique ids; the masks keep them apart
    assert warned(t, "cpu2/topology/physical_package_id")


def test_a_core_mask_contradicting_its_siblings_is_overruled_by_the_core_id(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    for n in range(4):  # SMT pairs (0,1) core 0 and (2,3) core 1; cpu0 names only itself
        tree.cpu(
            n,
            package=0,
            core=n // 2,
            package_cpus=range(4),
            core_cpus=[n] if n == 0 else [n - n % 2, n - n % 2 + 1],
        )
    t = discover(tmp_path)
    assert [(c.id, c.cpus) for c in t.cores] == [(0, (0, 1)), (1, (2, 3))]  # was (0,(0,)), (0,(1,)), ...
    assert any("core masks contradict" in w.message for w in t.warnings), t.warnings


def test_a_core_across_two_dies_takes_its_lowest_cpus_die(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    for n in range(4):
        die = 1 if n == 1 else n // 2
        tree.cpu(
            n, package=0, core=n // 2, die=die, package_cpus=range(4), core_cpus=[n - n % 2, n - n % 2 + 1]
        )
    t = discover(tmp_path)
    assert [c.die_id for c in t.cpus] == [0, 0, 1, 1]
    assert warned(t, "cpu1/topology/die_id")


def test_overlapping_caches_of_one_level_are_cut_to_a_partition(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path, cpus=4)
    tree.file(f"{CPU}/cpu0/cache/index3/shared_cpu_map", mask([0, 1]))  # cpu2's says 0-3
    t = discover(tmp_path)
    assert [c.cpus for c in t.caches_at(3)] == [(0, 1), (2, 3)]  # was (0,1) and (0,1,2,3)
    assert cache(t, 0, 3).cpus == (0, 1) and cache(t, 3, 3).cpus == (2, 3)
    assert warned(t, "cpu2/cache/index3/shared_cpu_map")
