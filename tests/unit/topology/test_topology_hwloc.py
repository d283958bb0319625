"""hwloc reads our own hand-made trees the way discovery does."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import skip_or_fail
from tests.kit import hwloc
from tests.kit.sysfs import basic_machine
from tests.unit.topology.test_topology_fixtures import check_against_hwloc
from tests.unit.topology.test_topology_pci import switch_machine


@pytest.mark.hwloc
@pytest.mark.parametrize("shape", ["1p4c", "2p2c2t", "switches"])
def test_hand_made_trees_agree_with_hwloc(tmp_path: Path, shape: str) -> None:
    if not hwloc.available():
        skip_or_fail("lstopo-no-graphics (Debian package hwloc) is not installed")
    if shape == "1p4c":
        basic_machine(tmp_path, cpus=4)
    elif shape == "2p2c2t":
        basic_machine(tmp_path, cpus=8, packages=2, threads=2)
    else:
        switch_machine(tmp_path)
    check_against_hwloc(tmp_path)
