"""The report on the test node: topodra's slices beside other drivers' shapes (tests/check_kit.py).

Expected findings are derived from the synthetic machine's manifest (what `topodra synth` built),
not from the discovery the check itself uses.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from topodra.common.check import build_report, node_devices, to_json
from topodra.common.check.report import Report
from topodra.common.topology import Topology, discover

from tests.check_kit import (
    DRACPU,
    DRANET,
    INTEL,
    NVIDIA,
    SRIOV,
    STALE_GPU,
    TOPODRA,
    expected_findings,
    manifest,
    report_findings,
)
from tests.unit.check.conftest import NODE

_TOPOLOGIES: dict[Path, Topology] = {}


def report_of(root: Path, slices: list[dict[str, Any]]) -> Report:
    if root not in _TOPOLOGIES:  # discovery is the slow part; the tree never changes
        _TOPOLOGIES[root] = discover(root)
    return build_report(_TOPOLOGIES[root], node_devices(slices, NODE))


def test_every_gap_and_wrong_value_is_named(root: Path, all_slices: list[dict[str, Any]]) -> None:
    report = report_of(root, all_slices)
    got = report_findings(report)
    assert got == expected_findings(manifest(root))
    assert not any(drv in TOPODRA for drv, *_ in got)  # topodra's own: clean
    assert report.exit_code == 1  # the stale GPU and the -1s are wrong values
    assert report.errors == sum(1 for k in got if k[4] == "error")


def test_how_each_driver_was_matched(root: Path, all_slices: list[dict[str, Any]]) -> None:
    doc = to_json(report_of(root, all_slices))
    matched = {d["driver"]: {x["matchedBy"] for x in d["devices"]} for d in doc["drivers"]}
    assert matched[NVIDIA] == {"pciBusID", "unmatched"}
    assert matched[DRANET] == {"dra.net/pciAddress (no pciBusID)", "dra.net/ifName"}  # cni0: virtual
    assert matched[SRIOV] == matched[INTEL] == {"pciBusID"}
    assert matched[DRACPU] == {"dra.cpu/numaNodeID"}
    assert matched["cpu.topodra.io"] == {"resource.kubernetes.io/numaNode"}
    stale = next(
        x
        for d in doc["drivers"]
        if d["driver"] == NVIDIA
        for x in d["devices"]
        if x["matchedBy"] == "unmatched"
    )
    assert STALE_GPU in stale["findings"][0]["message"] or any(
        STALE_GPU in f["message"] for f in stale["findings"]
    )


def _levels(report: Report, a: str, b: str) -> dict[str, Any]:
    pair = next(p for p in report.pairs if {p.a, p.b} == {a, b})
    return {lv.level: lv for lv in pair.levels}


def test_alignment_levels_per_pair(root: Path, all_slices: list[dict[str, Any]]) -> None:
    report = report_of(root, all_slices)
    acc, nic, cpu = TOPODRA[1], TOPODRA[2], TOPODRA[0]
    both_topodra = _levels(report, acc, nic)
    assert {lv: x.verdict for lv, x in both_topodra.items()} == dict.fromkeys(
        ("root", "numa", "switch", "leaf", "socket"), "yes"
    )

    gpu = _levels(report, NVIDIA, acc)
    assert (gpu["root"].verdict, gpu["numa"].verdict, gpu["switch"].verdict) == ("yes", "yes", "no")
    assert gpu["switch"].add == ((NVIDIA, "topology.topodra.io/pcieSwitch"),)
    assert gpu["leaf"].verdict == "no"
    assert gpu["leaf"].add == ((NVIDIA, "topology.topodra.io/pcieLeafSwitch"),)

    nets = _levels(report, DRANET, SRIOV)  # both publish NUMA as dra.net/numaNode only
    assert (nets["numa"].verdict, nets["numa"].via) == ("yes", "dra.net/numaNode")
    assert set(nets["numa"].add) == {
        (DRANET, "resource.kubernetes.io/numaNode"),
        (SRIOV, "resource.kubernetes.io/numaNode"),
    }

    intel = _levels(report, INTEL, acc)
    assert intel["numa"].verdict == "no" and intel["numa"].add == (
        (INTEL, "resource.kubernetes.io/numaNode"),
    )
    assert intel["switch"].add == ()  # the Flex GPUs sit on root ports: no switch to name

    lists = _levels(report, DRACPU, NVIDIA)  # a root list meets a root string by intersection
    assert lists["root"].verdict == "yes"
    ours = _levels(report, cpu, NVIDIA)
    assert ours["root"].verdict == "no" and ours["root"].add == ((cpu, "resource.kubernetes.io/pcieRoot"),)

    apart = _levels(report, INTEL, nic)  # no NIC shares a root with the Flex GPUs
    assert apart["root"].verdict == "no" and apart["root"].add == ()
    assert "shares a PCIe root" in apart["root"].reason


def _device(slices: list[dict[str, Any]], driver: str, name: str) -> dict[str, Any]:
    s = next(s for s in slices if s["spec"]["driver"] == driver)
    dev: dict[str, Any] = next(d for d in s["spec"]["devices"] if d["name"] == name)
    return dev


MUTATIONS: list[tuple[str, str, str, Any, str, str]] = [
    # driver, device, attribute, new value (None: delete), attribute reported, code
    (NVIDIA, "gpu-0", "resource.kubernetes.io/numaNode", {"int": 1}, "numaNode", "wrong"),
    (NVIDIA, "gpu-0", "resource.kubernetes.io/numaNode", {"int": -1}, "numaNode", "malformed"),
    (NVIDIA, "gpu-0", "resource.kubernetes.io/numaNode", {"string": "0"}, "numaNode", "malformed"),
    (NVIDIA, "gpu-0", "resource.kubernetes.io/numaNode", {"int": 7}, "numaNode", "wrong"),
    (NVIDIA, "gpu-1", "resource.kubernetes.io/pciBusID", {"string": "0000:0A:00.0"}, "pciBusID", "malformed"),
    (NVIDIA, "gpu-0", "resource.kubernetes.io/pciBusID", {"string": "05:00.0"}, "pciBusID", "malformed"),
    (
        NVIDIA,
        "gpu-0",
        "resource.kubernetes.io/pciBusID",
        {"strings": ["0000:05:00.0"]},
        "pciBusID",
        "malformed",
    ),
    (NVIDIA, "gpu-0", "resource.kubernetes.io/pcieRoot", {"string": "pci0000:07"}, "pcieRoot", "wrong"),
    (NVIDIA, "gpu-0", "resource.kubernetes.io/pcieRoot", {"string": "0000:02"}, "pcieRoot", "malformed"),
    (NVIDIA, "gpu-0", "resource.kubernetes.io/pcieRoot", {"int": 2}, "pcieRoot", "malformed"),
    (
        NVIDIA,
        "gpu-0",
        "resource.kubernetes.io/pcieRoot",
        {"strings": ["pci0000:02"]},
        "pcieRoot",
        "list-form",
    ),
    (NVIDIA, "gpu-0", "resource.kubernetes.io/pcieRoot", None, "pcieRoot", "missing"),
    (
        INTEL,
        "0000-17-00-0-0x56c0",
        "pciAddress",
        {"string": "0000:18:00.0"},
        "gpu.intel.com/pciAddress",
        "conflict",
    ),
    (
        DRACPU,
        "cpudevnuma000",
        "resource.kubernetes.io/pcieRoot",
        {"strings": ["pci0000:0c"]},
        "pcieRoot",
        "wrong",
    ),
    (DRACPU, "cpudevnuma000", "dra.net/numaNode", {"int": 1}, "dra.net/numaNode", "wrong"),
]


@pytest.mark.parametrize(("driver", "device", "attr", "value", "reported", "code"), MUTATIONS)
def test_each_kind_of_bad_value_is_reported(
    root: Path,
    all_slices: list[dict[str, Any]],
    driver: str,
    device: str,
    attr: str,
    value: Any,
    reported: str,
    code: str,
) -> None:
    slices = copy.deepcopy(all_slices)
    dev = _device(slices, driver, device)
    if value is None:
        del dev["attributes"][attr]
    else:
        dev["attributes"][attr] = value
    new = report_findings(report_of(root, slices)) - report_findings(report_of(root, all_slices))
    assert {(k[0], k[1], k[2], k[3]) for k in new} >= {(driver, device, reported, code)}, new


def test_numa_on_a_function_the_kernel_gives_none_is_wrong(
    root: Path, all_slices: list[dict[str, Any]]
) -> None:
    slices = copy.deepcopy(all_slices)
    vf = _device(slices, SRIOV, "0000-e1-00-1")
    vf["attributes"]["resource.kubernetes.io/numaNode"] = {"int": 0}  # a default of 0 where unknown
    got = report_findings(report_of(root, slices))
    assert (SRIOV, "0000-e1-00-1", "numaNode", "wrong", "error") in got


def test_topodra_vocabulary_is_checked_for_drivers_that_speak_it(
    root: Path, all_slices: list[dict[str, Any]]
) -> None:
    slices = copy.deepcopy(all_slices)
    s = next(s for s in slices if s["spec"]["driver"] == TOPODRA[1])
    dev = s["spec"]["devices"][0]
    assert "topology.topodra.io/pcieLeafSwitch" in dev["attributes"]
    dev["attributes"]["topology.topodra.io/pcieSwitch"] = {"string": "0000:99:00.0"}
    dev["attributes"]["topology.topodra.io/pcieLeafSwitch"] = {"string": "0000:98:00.0"}
    dev["attributes"]["topology.topodra.io/socket"] = {"int": 5}
    got = {(k[2], k[3]) for k in report_findings(report_of(root, slices)) if k[0] == TOPODRA[1]}
    assert got == {
        ("topology.topodra.io/pcieSwitch", "wrong"),
        ("topology.topodra.io/pcieLeafSwitch", "wrong"),
        ("topology.topodra.io/socket", "wrong"),
    }
    del dev["attributes"]["topology.topodra.io/pcieLeafSwitch"]  # an older topodra: told, not failed
    got = {k[2:] for k in report_findings(report_of(root, slices)) if k[0] == TOPODRA[1]}
    assert ("topology.topodra.io/pcieLeafSwitch", "missing", "warning") in got


def test_alignment_only_through_minus_one_is_called_false(
    root: Path, all_slices: list[dict[str, Any]]
) -> None:
    """A second driver that also writes -1 for the unknown-NUMA NIC: the scheduler would happily
    pair those two -1 devices, and the report must not call that alignment."""
    slices = [s for s in copy.deepcopy(all_slices) if s["spec"]["driver"] in (SRIOV,)]
    other = copy.deepcopy(slices[0])
    other["spec"]["driver"] = "other.example.com"
    other["spec"]["devices"] = [
        d for d in other["spec"]["devices"] if d["attributes"]["dra.net/numaNode"]["int"] == -1
    ]
    sriov = slices[0]
    sriov["spec"]["devices"] = [
        d for d in sriov["spec"]["devices"] if d["attributes"]["dra.net/numaNode"]["int"] == -1
    ]
    numa = _levels(report_of(root, [sriov, other]), SRIOV, "other.example.com")["numa"]
    assert (numa.verdict, numa.via) == ("false", "dra.net/numaNode")


def test_a_cpu_device_on_one_socket_of_a_node_that_spans_two(tmp_path: Path) -> None:
    """A NUMA node over two sockets (ghw's offlineCPUs and hwloc's 2pa captures are such), its
    CPUs of one socket reserved: the CPU device holds the other socket's CPUs and says so. The
    check, which knows the device only by its NUMA node, cannot call that socket wrong (it did,
    failing every captured tree's clean check); a socket that is not one of the node's still is."""
    from tests.check_kit import topodra_slices
    from tests.kit.sysfs import Tree

    root = tmp_path / "spans"
    tree = Tree(root).simple_cpus(4, packages=2)
    tree.node(0, range(4), distance="10")
    tree.file("sys/devices/system/cpu/online", "0-3")
    slices = topodra_slices(root, "n1", extra=("--cpu-reserved-cpus", "0-1"))
    report = build_report(discover(root), node_devices(slices, "n1"))
    socket = [f for _, _, f in report.findings() if f.attribute == "topology.topodra.io/socket"]
    assert [(f.severity, f.code) for f in socket] == [("info", "unverified")], socket
    assert "NUMA node 0 spans sockets 0, 1" in socket[0].message
    assert report.exit_code == 0
    for s in slices:
        for d in s["spec"]["devices"]:
            if s["spec"]["driver"] == "cpu.topodra.io":
                assert d["attributes"]["topology.topodra.io/socket"] == {"int": 1}
                d["attributes"]["topology.topodra.io/socket"] = {"int": 5}
    report = build_report(discover(root), node_devices(slices, "n1"))
    socket = [f for _, _, f in report.findings() if f.attribute == "topology.topodra.io/socket"]
    assert [(f.severity, f.code) for f in socket] == [("error", "wrong")], socket
