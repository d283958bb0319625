"""The CPU allocation policy: whole cores first, then no new splits, then fewest L3s, then lowest ids.

Hand-made machines pin down the rules on SMT, hybrid, SNC and sparse-id layouts; real captured
trees (through the driver's own grouping) check them on real topologies; and a brute-force
search over every subset of small random machines checks that the policy's answer is optimal,
which is independent of how the policy computes it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from topodra.common.topology import discover
from topodra.drivers.cpu import devices
from topodra.drivers.cpu.options import CpuOptions
from topodra.drivers.cpu.policy import Core, PolicyError, Request, check_explicit, choose

from tests.conftest import FixtureTrees


def smt2(n: int, l3_split: int | None = None) -> list[Core]:
    """n SMT-2 cores numbered like x86 servers: core i = (i, i+n); L3 changes every l3_split cores."""
    return [Core((i, i + n), l3=(i // l3_split if l3_split else 0)) for i in range(n)]


def every(cores: Sequence[Core]) -> set[int]:
    return {c for core in cores for c in core.cpus}


# --- SMT ----------------------------------------------------------------------------------------


def test_smt_whole_core_before_lowest_ids() -> None:
    cores = smt2(4)
    assert choose(cores, every(cores), Request(2)) == (0, 4)  # a whole core, not CPUs 0 and 1
    assert choose(cores, every(cores), Request(4)) == (0, 1, 4, 5)


def test_smt_odd_count_breaks_one_core() -> None:
    cores = smt2(4)
    got = choose(cores, every(cores), Request(3))
    assert got == (0, 1, 4)  # core (0,4) whole, then one CPU of the next core


def test_fragments_before_breaking_a_free_core() -> None:
    cores = smt2(4)
    free = every(cores) - {4}  # another claim holds CPU 4: core (0,4) is already split
    assert choose(cores, free, Request(1)) == (0,)  # the orphan sibling, not a fresh core
    assert choose(cores, free, Request(2)) == (1, 5)  # a whole core, not 0 + something
    assert choose(cores, free, Request(3)) == (0, 1, 5)


def test_full_cores_only() -> None:
    cores = smt2(4)
    free = every(cores) - {4}
    assert choose(cores, free, Request(4, full_cores=True)) == (1, 2, 5, 6)
    with pytest.raises(PolicyError, match="fullCores: 3 CPUs cannot be made of whole free cores"):
        choose(cores, free, Request(3, full_cores=True))
    with pytest.raises(PolicyError, match="only 6 CPUs in whole free cores"):
        choose(cores, free, Request(7, full_cores=True))


def test_full_cores_skip_cores_with_reserved_siblings() -> None:
    # CPU 4 is reserved for the system: core (0,4) appears in the device as (0,) and incomplete
    cores = [Core((0,), complete=False), Core((1, 5)), Core((2, 6))]
    assert choose(cores, {0, 1, 2, 5, 6}, Request(2, full_cores=True)) == (1, 5)
    assert choose(cores, {0, 1, 2, 5, 6}, Request(1)) == (0,)  # fine without fullCores
    with pytest.raises(PolicyError):
        choose(cores, {0, 1, 2, 5, 6}, Request(5, full_cores=True))


def test_not_enough_and_bad_counts() -> None:
    cores = smt2(2)
    with pytest.raises(PolicyError, match="asked for 5 CPUs, only 4 free CPUs are left"):
        choose(cores, every(cores), Request(5), "numa-0")
    with pytest.raises(PolicyError, match="at least 1"):
        choose(cores, every(cores), Request(0))
    with pytest.raises(PolicyError, match="only 0 free"):
        choose(cores, set(), Request(1))


# --- L3 -----------------------------------------------------------------------------------------


def test_one_l3_group_when_it_suffices() -> None:
    cores = smt2(8, l3_split=4)  # L3 0: cores 0-3, L3 1: cores 4-7
    free = every(cores) - {0}  # core (0,8) split: L3 0 has 3 whole cores + CPU 8
    got = choose(cores, free, Request(8))
    assert got == (4, 5, 6, 7, 12, 13, 14, 15)  # all of L3 1, not the lower ids across both
    got = choose(cores, free, Request(6))
    assert got == (1, 2, 3, 9, 10, 11)  # L3 0 fits whole cores: lowest ids win


def test_whole_cores_outrank_fewer_l3_groups() -> None:
    # L3 0: one whole core + two orphans; L3 1: two whole cores on one side... request 4
    cores = [
        Core((0, 10), l3=0),
        Core((1, 11), l3=0),
        Core((2, 12), l3=0),
        Core((3, 13), l3=1),
        Core((4, 14), l3=1),
    ]
    free = {0, 10, 1, 2, 3, 13, 4, 14}  # 11 and 12 held elsewhere
    got = choose(cores, free, Request(4))
    assert got == (3, 4, 13, 14)  # two whole cores in L3 1
    got = choose(cores, free, Request(6))
    # 3 whole cores exist only across both L3s; whole cores win over staying in one L3
    assert set(got) >= {0, 10, 3, 13, 4, 14}


def test_unknown_l3_is_one_group() -> None:
    cores = [Core((0,)), Core((1,)), Core((2,))]
    assert choose(cores, {0, 1, 2}, Request(2)) == (0, 1)


# --- hybrid -------------------------------------------------------------------------------------


def hybrid() -> list[Core]:
    p = [Core((2 * i, 2 * i + 1), core_type="core") for i in range(2)]  # P-cores 0-3, SMT-2
    e = [Core((4 + i,), core_type="atom") for i in range(4)]  # E-cores 4-7, one thread
    return p + e


def test_hybrid_odd_count_uses_a_whole_e_core_not_half_a_p_core() -> None:
    cores = hybrid()
    assert choose(cores, every(cores), Request(3)) == (0, 1, 4)


def test_hybrid_core_type_filter() -> None:
    cores = hybrid()
    assert choose(cores, every(cores), Request(2, core_type="atom")) == (4, 5)
    assert choose(cores, every(cores), Request(3, core_type="core")) == (0, 1, 2)
    with pytest.raises(PolicyError, match="of core type 'core'"):
        choose(cores, every(cores), Request(5, core_type="core"))
    with pytest.raises(PolicyError, match="fullCores"):
        choose(cores, every(cores), Request(3, core_type="core", full_cores=True))


def test_hybrid_full_cores_mixes_sizes_exactly() -> None:
    cores = hybrid()
    got = choose(cores, every(cores) - {0}, Request(3, full_cores=True))
    assert got == (2, 3, 4)  # P-core (2,3) + E-core 4; core (0,1) is split by another claim


# --- real topologies ----------------------------------------------------------------------------


def group(
    fixture_trees: FixtureTrees, name: str, device: str, options: CpuOptions | None = None
) -> devices.CpuGroup:
    topo = discover(fixture_trees.root(name))
    by_name = {g.name: g for g in devices.groups(topo, options or CpuOptions())}
    return by_name[device]


def test_snc_knl_four_threads_per_core(fixture_trees: FixtureTrees) -> None:
    # fake KNL in SNC-4: each NUMA node has 4 cores of 4 threads (CPUs i, i+16, i+32, i+48)
    g = group(fixture_trees, "hwloc--64intel64-fakeKNL-SNC4-hybrid", "numa-1")
    free = set(g.cpus)
    assert choose(g.cores, free, Request(4)) == (4, 20, 36, 52)
    got = choose(g.cores, free, Request(6))
    assert got == (4, 5, 20, 21, 36, 52)  # one whole core, then two CPUs of the next
    with pytest.raises(PolicyError):
        choose(g.cores, free, Request(6, full_cores=True))
    assert choose(g.cores, free, Request(8, full_cores=True)) == (4, 5, 20, 21, 36, 37, 52, 53)


def test_sparse_numa_ids_and_repeating_core_ids(fixture_trees: FixtureTrees) -> None:
    # NUMA ids 0,1,2,33,34,45,72,73; core ids repeat across the two nodes of a package
    g = group(fixture_trees, "hwloc--48amd64-4pa2n6c-sparse", "numa-45")
    assert g.cpus == (30, 31, 32, 33, 34, 35)
    assert choose(g.cores, set(g.cpus) - {30, 32}, Request(3)) == (31, 33, 34)


def test_core_granularity_groups_are_whole_cores(fixture_trees: FixtureTrees) -> None:
    g = group(
        fixture_trees, "hwloc--64intel64-fakeKNL-SNC4-hybrid", "core-0-5", CpuOptions(granularity="core")
    )
    assert g.cpus == (5, 21, 37, 53)
    assert choose(g.cores, set(g.cpus), Request(4, full_cores=True)) == g.cpus


# --- explicit CPUs ------------------------------------------------------------------------------


def test_explicit_cpus_validated() -> None:
    cores = smt2(4)
    free = every(cores) - {6}
    assert check_explicit(cores, free, {1, 5}, Request(2), "numa-0") == (1, 5)
    with pytest.raises(PolicyError, match="CPUs 9 are not part of device numa-0"):
        check_explicit(cores, free, {1, 9}, Request(2), "numa-0")
    with pytest.raises(PolicyError, match="CPUs 6 of device numa-0 are already held"):
        check_explicit(cores, free, {2, 6}, Request(2), "numa-0")
    with pytest.raises(PolicyError, match=r"lists 3 CPUs .* is for 2"):
        check_explicit(cores, free, {1, 2, 3}, Request(2), "numa-0")
    with pytest.raises(PolicyError, match="fullCores: CPUs 1 are only part of the core 1,5"):
        check_explicit(cores, free, {0, 4, 1}, Request(3, full_cores=True), "numa-0")
    assert check_explicit(cores, free, {0, 4, 1, 5}, Request(4, full_cores=True)) == (0, 1, 4, 5)


# --- optimality against brute force -------------------------------------------------------------


@st.composite
def machines(draw: st.DrawFn) -> tuple[list[Core], set[int], int]:
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=6))
    ids = draw(st.permutations(range(sum(sizes) * 3)))  # sparse, shuffled CPU numbers
    cores = []
    at = 0
    for size in sizes:
        cpus = tuple(sorted(ids[at : at + size]))
        at += size
        cores.append(Core(cpus, l3=draw(st.integers(0, 2)), complete=draw(st.booleans())))
    all_cpus = sorted(every(cores))
    free = set(draw(st.lists(st.sampled_from(all_cpus), unique=True, min_size=1)))
    count = draw(st.integers(1, len(all_cpus)))
    return cores, free, count


def quality(cores: Sequence[Core], free: set[int], picked: set[int]) -> tuple[int, int]:
    """(CPUs not taken as whole free cores, whole free cores broken): the policy's first two ranks."""
    whole_taken = 0
    broken = 0
    for core in cores:
        whole_free = set(core.cpus) <= free
        inside = picked & set(core.cpus)
        if whole_free and inside == set(core.cpus):
            whole_taken += len(inside)
        elif whole_free and inside:
            broken += 1
    return len(picked) - whole_taken, broken


@settings(max_examples=300, deadline=None)
@given(machines())
def test_policy_is_optimal_by_brute_force(machine: tuple[list[Core], set[int], int]) -> None:
    cores, free, count = machine
    if count > len(free):
        with pytest.raises(PolicyError):
            choose(cores, free, Request(count))
        return
    got = choose(cores, free, Request(count))
    assert len(got) == count and set(got) <= free and list(got) == sorted(set(got))
    assert choose(cores, free, Request(count)) == got  # deterministic
    l3 = {c: core.l3 for core in cores for c in core.cpus}
    options = [set(s) for s in itertools.combinations(sorted(free), count)]
    best = min(quality(cores, free, s) for s in options)
    assert quality(cores, free, set(got)) == best
    # fewest L3 groups: when one group reaches the best quality, the answer stays in one group
    if any(quality(cores, free, s) == best and len({l3[c] for c in s}) == 1 for s in options):
        assert len({l3[c] for c in got}) == 1


@settings(max_examples=200, deadline=None)
@given(machines())
def test_full_cores_exact_or_refused(machine: tuple[list[Core], set[int], int]) -> None:
    cores, free, count = machine
    usable = [c for c in cores if set(c.cpus) <= free and c.complete]
    sizes = [len(c.cpus) for c in usable]
    possible = any(
        sum(combo) == count for r in range(len(sizes) + 1) for combo in itertools.combinations(sizes, r)
    )
    if not possible:
        with pytest.raises(PolicyError):
            choose(cores, free, Request(count, full_cores=True))
        return
    got = set(choose(cores, free, Request(count, full_cores=True)))
    assert len(got) == count
    for core in cores:  # every core is either fully in or fully out, and only complete free cores
        inside = got & set(core.cpus)
        assert not inside or (inside == set(core.cpus) and core in usable)
