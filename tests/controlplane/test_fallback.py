"""The best-locality claims (hack/bench/fallback.py, shipped as deploy/examples/best-locality-*)
on the real kube-scheduler: each fallback level is reached exactly when the better ones are full.

Nodes are Node objects whose ResourceSlices the real drivers build from synthetic machines laid
out for the purpose (no kubelet: the scheduler's allocation is what is tested). Each claim is
pinned to its node and submitted after the previous one is allocated, as a user's pods would
arrive one after the other; what the scheduler chose is read from the claim's status and
checked against the devices' attributes, not only against the subrequest names.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from topodra.common.synth import build, load_spec_text

from hack.bench import fallback
from tests.controlplane.allocation import ACC, NIC, Node, claim_namespace, submit
from tests.controlplane.cluster import ControlPlane

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]


def _cpu(cores: int) -> dict[str, Any]:
    return {
        "vendor": "GenuineIntel",
        "model_name": "synthetic",
        "family": 6,
        "model": 143,
        "stepping": 8,
        "mhz": 2000,
        "sockets": 2,
        "numa_nodes_per_socket": 2,
        "cores_per_socket": cores,
        "threads_per_core": 1,
        "caches": {"l3": {"size_kib": 32768, "ways": 16, "scope": "socket"}},
    }


def _root(numa: int, ports: list[dict[str, Any]], bus: int | None = None) -> dict[str, Any]:
    root: dict[str, Any] = {"numa_node": numa, "ports": ports}
    if bus is not None:
        root["bus"] = bus
    return root


def _switch(*devices: str) -> dict[str, Any]:
    return {"switch": {"ports": [{"device": d} for d in devices]}}


# One accelerator and one NIC per level, and nothing better for the pairs that come later:
#   switch: a switch holding an accelerator and a NIC
#   root:   one root complex, the accelerator and the NIC on two switches below it
#   numa:   an accelerator behind its own switch, a NIC on a root port, both on NUMA node 0
#   socket: an accelerator on NUMA node 0, a NIC on NUMA node 1 of the same socket
#   any:    an accelerator on socket 0, a NIC on socket 1
LEVELS_MACHINE = {
    "version": 1,
    "name": "fallback-levels",
    "description": "one accelerator-NIC pair per locality level (tests/controlplane/test_fallback.py)",
    "cpu": _cpu(48),
    "memory": {"per_node_mib": 65536, "distances": {"same_socket": 12, "remote": 21}},
    "pci": {
        "roots": [
            _root(0, [_switch("h100-sxm", "cx7")]),
            _root(0, [_switch("h100-sxm"), _switch("cx7")]),
            _root(0, [_switch("h100-sxm")]),
            _root(0, [{"device": "cx7"}]),
            _root(0, [_switch("h100-sxm")]),
            _root(0, [_switch("h100-sxm")]),
            _root(1, [{"device": "cx7"}]),
            _root(2, [{"device": "cx7"}], bus=128),
        ]
    },
}

# Four accelerators and four NICs behind one switch, then four and four under one root complex
# on two switches: the group levels switch and root, in that order.
GROUP_MACHINE = {
    "version": 1,
    "name": "fallback-groups",
    "description": "group levels switch and root (tests/controlplane/test_fallback.py)",
    "cpu": _cpu(96),  # 48 CPUs per NUMA node: both groups' 16 CPUs fit on node 0
    "memory": {"per_node_mib": 65536, "distances": {"same_socket": 12, "remote": 21}},
    "pci": {
        "roots": [
            _root(0, [_switch(*(["h100-sxm"] * 4 + ["cx7"] * 4))]),
            _root(
                0,
                [
                    _switch("h100-sxm", "h100-sxm", "cx7", "cx7"),
                    _switch("h100-sxm", "h100-sxm", "cx7", "cx7"),
                ],
            ),
        ]
    },
}


@pytest.fixture(scope="module")
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    with claim_namespace(control_plane, "fallback") as ns:
        yield ns


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import json

    from topodra.common.synth import load_spec

    out: dict[str, Path] = {}
    for name, spec in (("levels", LEVELS_MACHINE), ("groups", GROUP_MACHINE)):
        root = tmp_path_factory.mktemp(name)
        build(load_spec_text(json.dumps(spec)), root)
        out[name] = root
    for name in ("2s-8acc-8nic", "2s-8acc-8nic-snc2"):
        root = tmp_path_factory.mktemp(name)
        build(load_spec(name), root)
        out[name] = root
    return out


def pair_levels(results: Sequence[dict[str, Any]]) -> dict[int, tuple[str, str]]:
    """pair index -> (accelerator level, NIC level) as the subrequest names record them."""
    out: dict[int, list[str]] = {}
    for r in results:
        request, _, level = r["request"].partition("/")
        kind, _, index = request.rpartition("-")
        if kind in ("accelerator", "nic"):
            out.setdefault(int(index), ["", ""])[0 if kind == "accelerator" else 1] = level
    return {i: (a, n) for i, (a, n) in out.items()}


def device(results: Sequence[dict[str, Any]], request: str) -> dict[str, Any]:
    (r,) = [r for r in results if r["request"].startswith(f"{request}/")]
    return r


def true_level(node: Node, acc: dict[str, Any], nic: dict[str, Any]) -> str:
    """The closest level two devices share, from their published attributes."""
    for level, key in fallback.LEVEL_ATTRIBUTE.items():
        a = node.attr(acc, key)
        if a is not None and a == node.attr(nic, key):
            return level
    return "any"


def test_one_accelerator_falls_back_one_level_at_a_time(
    control_plane: ControlPlane, namespace: str, machines: dict[str, Path]
) -> None:
    node = Node(control_plane, machines["levels"], "levels-1")
    got = []
    for i in range(5):
        results = submit(control_plane, namespace, node, f"one-{i}", fallback.best_locality_spec(1))
        assert results is not None, f"claim {i} found no room"
        ((acc_level, nic_level),) = pair_levels(results).values()
        assert acc_level == nic_level
        acc, nic = device(results, "accelerator-0"), device(results, "nic-0")
        assert true_level(node, acc, nic) == acc_level  # the level is the devices' own
        (cpu,) = [r for r in results if r["driver"] == "cpu.topodra.io"]
        if acc_level != "any":  # CPUs on the accelerator's NUMA node
            assert node.attr(cpu, fallback.NUMA) == node.attr(acc, fallback.NUMA)
        got.append(acc_level)
    assert got == list(fallback.PAIR_LEVELS)
    assert submit(control_plane, namespace, node, "one-5", fallback.best_locality_spec(1)) is None


def test_two_pairs_each_take_the_best_level_left(
    control_plane: ControlPlane, namespace: str, machines: dict[str, Path]
) -> None:
    node = Node(control_plane, machines["levels"], "levels-2")
    first = submit(control_plane, namespace, node, "two-0", fallback.best_locality_spec(2))
    second = submit(control_plane, namespace, node, "two-1", fallback.best_locality_spec(2))
    last = submit(control_plane, namespace, node, "two-2", fallback.best_locality_spec(1))
    assert first is not None and second is not None and last is not None
    levels = [lv for r in (first, second, last) for lv, _ in pair_levels(r).values()]
    assert sorted(levels, key=fallback.PAIR_LEVELS.index) == list(fallback.PAIR_LEVELS)
    assert {lv for lv, _ in pair_levels(first).values()} == {"switch", "root"}
    assert {lv for lv, _ in pair_levels(second).values()} == {"numa", "socket"}
    for results in (first, second):
        for i, (a, n) in pair_levels(results).items():
            acc, nic = device(results, f"accelerator-{i}"), device(results, f"nic-{i}")
            assert a == n == true_level(node, acc, nic)


def group_level(results: Sequence[dict[str, Any]]) -> str:
    levels = {r["request"].partition("/")[2] for r in results if r["driver"] in (ACC, NIC)}
    assert len(levels) == 1, levels  # the accelerators and the NICs at one level
    (level,) = levels
    return level


@pytest.mark.parametrize(
    ("machine", "sizes", "expected"),
    [
        ("groups", (4, 4, 4), ("switch", "root", None)),
        ("2s-8acc-8nic", (4, 4, 4), ("numa-rails", "numa-rails", None)),
        ("2s-8acc-8nic-snc2", (4, 4), ("socket-rails", "socket-rails")),
        ("2s-8acc-8nic", (8,), ("rails",)),
        ("levels", (4, 1), ("socket", "any")),
        ("levels", (5,), ("any",)),
    ],
)
def test_groups_fall_back_through_their_levels(
    control_plane: ControlPlane,
    namespace: str,
    machines: dict[str, Path],
    machine: str,
    sizes: tuple[int, ...],
    expected: tuple[str | None, ...],
) -> None:
    node = Node(control_plane, machines[machine], f"group-{machine[:8]}")
    for i, (k, want) in enumerate(zip(sizes, expected, strict=True)):
        spec = fallback.group_spec(k) if k > fallback.PAIR_LIMIT else fallback.best_locality_spec(k)
        results = submit(control_plane, namespace, node, f"{node.name}-{i}", spec)
        if want is None:
            assert results is None
            continue
        assert results is not None, f"{machine}: job {i} ({k}) found no room"
        if k > fallback.PAIR_LIMIT:
            assert group_level(results) == want
            accs = [r for r in results if r["driver"] == ACC]
            nics = [r for r in results if r["driver"] == NIC]
            assert len(accs) == len(nics) == k
            if want.endswith("rails"):
                for group in (accs, nics):
                    switches = [node.attr(r, fallback.SWITCH) for r in group]
                    assert None not in switches and len(set(switches)) == k
                # on these machines (one NIC per accelerator switch) rails pair every accelerator
                assert {node.attr(r, fallback.SWITCH) for r in accs} == {
                    node.attr(r, fallback.SWITCH) for r in nics
                }
        else:
            assert {lv for lv, _ in pair_levels(results).values()} == {want}
