"""The 26 captured machines: discovery agrees with each expected.json, with hwloc, and survives capture.

Machines nobody here has seen are checked the same way, so a failure here is a cause to fix in
discovery, never a case to special-case.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from topodra.common.topology import discover
from topodra.common.topology.capture import capture
from topodra.common.topology.jsonview import to_json
from topodra.common.topology.model import Topology
from topodra.drivers.cli.capture import driver_edge_reads

from tests.conftest import FixtureTrees, fixture_names, skip_or_fail
from tests.kit import hwloc
from tests.kit.expected import expected_view, normalized

NAMES = fixture_names()
SECTIONS = ("cpus", "complete_cpus", "packages", "numa", "caches", "cores", "pci", "net")


@pytest.mark.parametrize("name", NAMES)
def test_agrees_with_expected_json(fixture_trees: FixtureTrees, name: str) -> None:
    root = fixture_trees.root(name)
    expected = normalized(json.loads(fixture_trees.expected(name).read_text()))
    got = normalized(expected_view(discover(root)))
    assert set(expected) == set(SECTIONS)
    for section in SECTIONS:
        assert got[section] == expected[section], f"{name}: {section} differs"


@pytest.mark.parametrize("name", NAMES)
def test_capture_of_a_fixture_reproduces_its_json(
    fixture_trees: FixtureTrees, name: str, tmp_path: Path
) -> None:
    root = fixture_trees.root(name)
    archive = tmp_path / "capture.tar.xz"
    capture(root, archive, driver_edge_reads)  # as the command does
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "unpacked", filter="tar")
    assert to_json(discover(tmp_path / "unpacked")) == to_json(discover(root))


@pytest.mark.hwloc
@pytest.mark.parametrize("name", NAMES)
def test_agrees_with_hwloc(fixture_trees: FixtureTrees, name: str) -> None:
    if not hwloc.available():
        skip_or_fail("lstopo-no-graphics (Debian package hwloc) is not installed")
    check_against_hwloc(fixture_trees.root(name))


def check_against_hwloc(root: Path) -> None:
    """lstopo and discover() on the same tree: PUs, packages, cores, caches, NUMA nodes, PCI."""
    h = hwloc.view(root)
    t = discover(root)
    assert h.pus == t.usable_cpus()
    assert h.packages == frozenset(p.cpus for p in t.packages)
    assert h.cores == frozenset(c.cpus for c in t.cores)
    assert h.caches == frozenset((c.level, c.type, c.cpus) for c in t.caches)
    check_numa_against_hwloc(h, t)
    check_pci_against_hwloc(h, t)


def check_pci_against_hwloc(h: hwloc.HwlocView, t: Topology) -> None:
    # Debian's hwloc is built without 32-bit PCI domains and skips them (VMD, 10000:...)
    assert h.pci == frozenset(p.address for p in t.pci_devices if len(p.address.split(":")[0]) == 4)


def check_numa_against_hwloc(h: hwloc.HwlocView, t: Topology) -> None:
    if not t.numa_nodes:
        assert h.numa_ids == frozenset({0})  # hwloc invents one node where sysfs lists none
        return
    seen: set[int] = set()
    overlapping = False
    for n in t.numa_nodes:
        overlapping |= bool(seen & set(n.cpus))
        seen |= set(n.cpus)
    if overlapping:
        return  # buggy firmware: hwloc rewrites the nodes, we report them as sysfs lists them
    assert h.numa_ids == frozenset(n.id for n in t.numa_nodes)
    for n in t.numa_nodes:
        if n.cpus:
            assert h.numa_cpus[n.id] == n.cpus
