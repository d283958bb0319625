"""What a CPU driver process loads follows what it is configured to do: the NRI client (its
connection, protocol and messages) only with --cpu-pinning auto, the slice publisher only when
publishing. Each is a module set a node agent would otherwise keep in memory for nothing
(hack/bench-peer measures the RSS; docs/bench/latest.md). Checked in a fresh interpreter, since
this test process has imported everything already."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FixtureTrees

TREE = "hwloc--32intel64-2p8co2t+8ve"

_BUILD = """
import sys
from pathlib import Path
from topodra.common.topology import discover
from topodra.drivers.cpu.driver import CpuDriver
from topodra.drivers.cpu.options import CpuOptions
root = Path(sys.argv[1])
CpuDriver(discover(root), CpuOptions(hook_dir=Path(sys.argv[2]), pinning=sys.argv[3]), root)
print(" ".join(sorted(m for m in sys.modules if m.startswith("topodra.common.nri"))))
"""


def loaded_nri(root: Path, hooks: Path, pinning: str) -> list[str]:
    got = subprocess.run(
        [sys.executable, "-c", _BUILD, str(root), str(hooks), pinning],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return got.stdout.split()


@pytest.mark.parametrize("pinning", ["none", "hook"])
def test_nri_is_not_loaded_without_pinning_mode_auto(
    fixture_trees: FixtureTrees, tmp_path: Path, pinning: str
) -> None:
    assert loaded_nri(fixture_trees.root(TREE), tmp_path, pinning) == []


def test_nri_is_loaded_with_pinning_mode_auto(fixture_trees: FixtureTrees, tmp_path: Path) -> None:
    assert "topodra.common.nri.follower" in loaded_nri(fixture_trees.root(TREE), tmp_path, "auto")


def test_serve_loads_the_publisher_only_to_publish() -> None:
    code = "import sys, topodra.drivers.cli.serve; print('topodra.common.publisher.publisher' in sys.modules)"
    got = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert got.stdout.strip() == "False"
