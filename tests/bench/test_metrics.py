"""Placement metrics: distances, pairing, stranded devices, the cost model (pure, no cluster).

The machine-level tests read the slices the real drivers build for the synthetic training node
and for the captured 8-accelerator machine, the same inventories the study uses.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hack.bench import sim
from hack.bench.inventory import ACCELERATOR, CPU, NIC, Dev, Machine, machine_from_slices
from hack.bench.metrics import (
    CROSS,
    NUMA_LEVEL,
    ROOT,
    SOCKET,
    SWITCH,
    CostModel,
    Placement,
    Timing,
    aligned_pairs_possible,
    best_fill,
    best_pairing,
    distance,
    free_on_node,
    percentile,
    placement_from_results,
    score_pairs,
    stranded_aligned,
    stranded_count,
    summarize,
)
from hack.bench.workload import Job
from tests.conftest import FIXTURES, skip_or_fail


def acc(name: str, switch: str | None, root: str, numa: int, socket: int) -> Dev:
    return Dev(ACCELERATOR, name, numa, socket, root, switch)


def nic(name: str, switch: str | None, root: str, numa: int, socket: int) -> Dev:
    return Dev(NIC, name, numa, socket, root, switch)


def cpu(name: str, numa: int, socket: int, cpus: int) -> Dev:
    return Dev(CPU, name, numa, socket, cpus=cpus)


def test_distance_levels() -> None:
    a = acc("a", "sw0", "r0", 0, 0)
    assert distance(a, nic("n", "sw0", "r0", 0, 0)) == SWITCH
    assert distance(a, nic("n", "sw1", "r0", 0, 0)) == ROOT
    assert distance(a, nic("n", None, "r1", 0, 0)) == NUMA_LEVEL
    assert distance(a, nic("n", None, "r1", 1, 0)) == SOCKET
    assert distance(a, nic("n", None, "r1", 1, 1)) == CROSS
    # unknown never matches unknown
    assert distance(Dev(ACCELERATOR, "x"), Dev(NIC, "y")) == CROSS


devs = st.tuples(
    st.sampled_from(["s0", "s1", "s2", None]),
    st.sampled_from(["r0", "r1", "r2"]),
    st.integers(0, 3),
    st.integers(0, 1),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(devs, min_size=1, max_size=5), st.lists(devs, min_size=1, max_size=5))
def test_best_pairing_is_optimal(
    a_specs: list[tuple[str | None, str, int, int]], n_specs: list[tuple[str | None, str, int, int]]
) -> None:
    accs = [acc(f"a{i}", *s) for i, s in enumerate(a_specs)]
    nics = [nic(f"n{i}", *s) for i, s in enumerate(n_specs)]
    pairs = best_pairing(accs, nics)
    k = min(len(accs), len(nics))
    assert len(pairs) == k
    assert len({a.name for a, _ in pairs}) == len({n.name for _, n in pairs}) == k
    # brute force over every injective assignment of the first k accelerators
    brute = min(
        sum(distance(accs[i], nics[j]) for i, j in enumerate(perm))
        for perm in itertools.permutations(range(len(nics)), k)
    )
    assert sum(distance(a, n) for a, n in pairs) == brute


def test_score_pairs_counts_cpu_locality() -> None:
    near = acc("a0", "sw0", "r0", 0, 0)
    far = acc("a1", "sw4", "r4", 1, 1)
    p = Placement(
        Job(0, 2),
        "n",
        (near, far),
        (nic("n0", "sw0", "r0", 0, 0), nic("n1", None, "r9", 0, 0)),
        ((cpu("numa-0", 0, 0, 56), 8),),
    )
    scores = sorted(score_pairs(p), key=lambda s: s.level)
    assert [s.level for s in scores] == [SWITCH, CROSS]
    assert scores[0].numa and scores[0].socket and not scores[0].cpu_remote
    assert scores[1].crosses_socket and scores[1].cpu_remote and not scores[1].socket


def test_placement_from_results_reads_consumed_cpus() -> None:
    m = Machine(
        "t",
        (acc("a0", "sw0", "r0", 0, 0), nic("n0", "sw0", "r0", 0, 0), cpu("numa-0", 0, 0, 56)),
    )
    results: list[dict[str, Any]] = [
        {"request": "accelerator-0", "driver": ACCELERATOR, "pool": "node", "device": "a0"},
        {"request": "nic-0", "driver": NIC, "pool": "node", "device": "n0"},
        {
            "request": "cpus-0",
            "driver": CPU,
            "pool": "node",
            "device": "numa-0",
            "consumedCapacity": {"cpu.topodra.io/cpu": "4"},
        },
    ]
    p = placement_from_results(Job(0, 1), "node", m, results)
    assert [d.name for d in p.accelerators] == ["a0"] and [d.name for d in p.nics] == ["n0"]
    assert p.cpus == ((m.device(CPU, "numa-0"), 4),)
    with pytest.raises(KeyError, match="nope"):
        placement_from_results(Job(0, 1), "node", m, [{"driver": NIC, "pool": "node", "device": "nope"}])
    with pytest.raises(ValueError, match="other"):
        placement_from_results(Job(0, 1), "node", m, [{"driver": NIC, "pool": "other", "device": "n0"}])


def test_best_fill() -> None:
    assert best_fill(7, [4, 4, 2, 8]) == 6
    assert best_fill(8, [8]) == 8
    assert best_fill(3, [4, 8]) == 0
    assert best_fill(0, [1]) == 0


def test_percentile_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile(list(map(float, range(100))), 0.99) == 98.0


def test_cost_model_is_linear_in_crossing_pairs() -> None:
    model = CostModel(bytes_per_step=1e9, joules_per_byte=1e-10, steps_per_second=2.0)
    zero, three = model.cost(0), model.cost(3)
    assert zero["kwh_per_day"] == 0
    assert three["cross_socket_bytes_per_step"] == 3e9
    assert three["joules_per_step"] == pytest.approx(0.3)
    assert three["kwh_per_day"] == pytest.approx(0.3 * 2 * 86400 / 3.6e6)


# ----- real machines: the inventories the study uses ---------------------------------------


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Machine]:
    work = tmp_path_factory.mktemp("machines")
    kinds = ["synth:2s-8acc-8nic", "synth:2s-8acc-8nic-snc2"]
    if (FIXTURES / f"{sim.CAPTURED_8ACC}.tar.xz").is_file():
        kinds.append(f"captured:{sim.CAPTURED_8ACC}")
    out = {}
    for kind in kinds:
        drivers = sim.driver_devices(sim.sysfs_root(kind, work))
        out[kind] = machine_from_slices(kind, sim.node_slices("node-a", "uid-1", drivers))
    return out


def _captured(machines: dict[str, Machine]) -> Machine:
    kind = f"captured:{sim.CAPTURED_8ACC}"
    if kind not in machines:
        skip_or_fail(f"captured machine {sim.CAPTURED_8ACC} not in {FIXTURES}")
    return machines[kind]


def test_training_node_has_eight_aligned_pairs(machines: dict[str, Machine]) -> None:
    for kind in ("synth:2s-8acc-8nic", "synth:2s-8acc-8nic-snc2"):
        m = machines[kind]
        assert len(m.of(ACCELERATOR)) == 8
        free = free_on_node(m, [])
        assert aligned_pairs_possible(m, free, 4) == 8, kind
        # 29 CPUs per accelerator: 3 shares fit in 112 CPUs (one NUMA node per socket), 1 in 56 (SNC-2)
        assert aligned_pairs_possible(m, free, 29) == (6 if kind.endswith("8nic") else 4), kind


def test_captured_machine_has_two_aligned_pairs(machines: dict[str, Machine]) -> None:
    m = _captured(machines)
    assert len(m.of(ACCELERATOR)) == 8 and len(m.of(NIC)) == 4
    assert aligned_pairs_possible(m, free_on_node(m, []), 4) == 2  # one InfiniBand NIC per switch


def test_taken_devices_and_cpus_are_not_free(machines: dict[str, Machine]) -> None:
    m = machines["synth:2s-8acc-8nic"]
    a = m.of(ACCELERATOR)[0]
    n = next(x for x in m.of(NIC) if x.switch == a.switch)
    numa0 = next(c for c in m.of(CPU) if c.numa == a.numa)
    p = Placement(Job(0, 1), "node-a", (a,), (n,), ((numa0, 110),))
    free = free_on_node(m, [p])
    assert a not in free.accelerators and n not in free.nics
    assert free.cpus[numa0.name] == numa0.cpus - 110
    # two CPUs left on that NUMA node: none of its other 3 pairs can get 4 CPUs there
    assert aligned_pairs_possible(m, free, 4) == 4


def test_stranded_on_the_captured_machine(machines: dict[str, Machine]) -> None:
    m = _captured(machines)
    nodes = {"ve": m}
    free = {"ve": free_on_node(m, [])}
    pending = [Job(0, 1), Job(1, 4)]
    s = stranded_aligned(nodes, free, pending)
    assert (s.free_accelerators, s.free_nics) == (8, 4)
    assert s.stranded_accelerators == 7  # only the 1-accelerator job fits (2 aligned pairs)
    assert s.stranded_nics == 3
    c = stranded_count(nodes, free, pending)
    # count-only: the 4-accelerator job fits (4 NICs), and then no NIC is left for the others
    assert (c.stranded_accelerators, c.stranded_nics) == (4, 0)


def test_summarize_end_to_end(machines: dict[str, Machine]) -> None:
    m = machines["synth:2s-8acc-8nic"]
    nodes = {"node-a": m}
    accs = m.of(ACCELERATOR)
    nics = [x for x in m.of(NIC) if x.switch is None] + [x for x in m.of(NIC) if x.switch is not None]
    cpus = sorted(m.of(CPU), key=lambda d: d.numa or 0)
    # a count-only style landing: first accelerator with the onboard NIC, CPUs on socket 1
    p = Placement(Job(0, 1), "node-a", (accs[0],), (nics[0],), ((cpus[-1], 4),))
    jobs = [Job(0, 1), Job(1, 8)]
    timing = Timing(bound={"job-000-1acc": 0.05}, allocated={"job-000-1acc": 0.04})
    r = summarize("count-only", jobs, jobs, [p], nodes, timing, CostModel())
    assert r["jobs_placed"] == 1 and r["pairs"] == 1
    assert r["aligned_switch"] == 0 and r["aligned_root"] == 0
    assert r["aligned_numa"] == 0  # CPUs on the other socket
    assert r["accelerators_cpu_remote"] == 1
    assert r["free_accelerators"] == 7
    assert r["stranded_accelerators_aligned"] == 7  # the pending 8-accelerator job cannot fit
    assert r["bound_p50_ms"] == pytest.approx(50)


def test_summarize_breaks_down_by_machine_and_size(machines: dict[str, Machine]) -> None:
    hgx, snc = machines["synth:2s-8acc-8nic"], machines["synth:2s-8acc-8nic-snc2"]
    nodes = {"a": hgx, "b": snc}
    p = Placement(Job(0, 2), "b", snc.of(ACCELERATOR)[:2], (), ())
    timing = Timing(bound={"job-000-2acc": 0.2})
    r = summarize("aligned", [Job(0, 2), Job(1, 1)], [Job(0, 2)], [p], nodes, timing, CostModel())
    assert r["accelerators_by_machine"] == {"synth:2s-8acc-8nic": [0, 8], "synth:2s-8acc-8nic-snc2": [2, 8]}
    assert r["bound_ms_by_size"]["2"] == {"p50": pytest.approx(200), "max": pytest.approx(200)}
    assert r["bound_ms_by_size"]["1"] == {"p50": None, "max": None}


def _two_socket() -> Machine:
    return Machine(
        "test",
        (
            acc("a0", "s0", "r0", 0, 0),
            acc("a1", "s1", "r1", 1, 1),
            nic("n0", "s0", "r0", 0, 0),
            nic("n1", "s1", "r1", 1, 1),
            cpu("c0", 0, 0, 8),
            cpu("c1", 1, 1, 8),
        ),
    )


def test_avoidable_cross_socket_pairs_are_replayed_in_order() -> None:
    from hack.bench.metrics import Placement, avoidable_cross_socket

    m = _two_socket()
    crossed = Placement(Job(0, 1), "n", (m.device(ACCELERATOR, "a0"),), (m.device(NIC, "n1"),), ())
    # the first job crossed sockets while a0-n0 was free: avoidable
    assert avoidable_cross_socket({"n": m}, [crossed]) == 1
    # a1 with n0 first (itself avoidable), then a0 can only have n1: that crossing was forced
    first = Placement(Job(1, 1), "n", (m.device(ACCELERATOR, "a1"),), (m.device(NIC, "n0"),), ())
    assert avoidable_cross_socket({"n": m}, [first, crossed]) == 1  # first itself was avoidable
    aligned = Placement(Job(2, 1), "n", (m.device(ACCELERATOR, "a1"),), (m.device(NIC, "n1"),), ())
    took_n0 = Placement(Job(3, 1), "n", (), (m.device(NIC, "n0"),), ())
    later = Placement(Job(4, 1), "n", (m.device(ACCELERATOR, "a0"),), (), ())
    assert avoidable_cross_socket({"n": m}, [aligned, took_n0, later]) == 0


def test_stranded_for_each_scenario() -> None:
    from hack.bench.metrics import Placement, free_on_node, stranded_for
    from hack.bench.workload import ALIGNED, BEST, COUNT_ONLY

    m = _two_socket()
    # a job took a0 with n1 (a cross-socket pair): a1 stays free without a NIC on its switch
    taken = [Placement(Job(0, 1), "n", (m.device(ACCELERATOR, "a0"),), (m.device(NIC, "n1"),), ())]
    free = {"n": free_on_node(m, taken)}
    assert stranded_for(COUNT_ONLY, {"n": m}, free, 4) == 0  # a1 + n0 still make a count-only job
    assert stranded_for(BEST, {"n": m}, free, 4) == 0
    assert stranded_for(ALIGNED, {"n": m}, free, 4) == 1  # no NIC on a1's switch
