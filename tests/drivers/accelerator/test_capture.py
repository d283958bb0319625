"""`topodra capture` of an accelerator machine carries what the accelerator driver reads beside
discovery (NVIDIA minors, device memory, DRM nodes, `proc/devices`), so the driver run on the
unpacked capture sees the machine it saw there: a user's capture reproduces prepare, not only the
slices.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import REPO
from tests.drivers.accelerator.test_slices import accelerators
from tests.kit.machines import SynthTree


def capture_and_unpack(root: Path, dest: Path) -> Path:
    archive = dest / "machine.tar.xz"
    cmd = [sys.executable, "-m", "topodra.drivers.cli.main", "capture", "--sysfs-root", str(root)]
    done = subprocess.run(
        [*cmd, "--file", str(archive)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert done.returncode == 0, done.stderr
    with tarfile.open(archive) as tar:
        tar.extractall(dest / "unpacked", filter="tar")
    return dest / "unpacked"


def driver_view(root: Path) -> dict[str, tuple[Any, ...]]:
    return {
        name: (a.device, a.address, a.driver, a.nodes, a.shared_nodes, a.problem)
        for name, a in accelerators(root).items()
    }


def test_the_driver_sees_the_same_accelerators_in_a_capture(
    synth_machine: Callable[[str], SynthTree], tmp_path: Path
) -> None:
    root = synth_machine("gpu-box").root
    live = driver_view(root)
    # what only the edge reads give: NVIDIA minors (no problem, /dev/nvidiaN), AMD VRAM and nodes
    nvidia = [v for v in live.values() if v[2] == "nvidia"]
    assert len(nvidia) == 3 and all(v[5] is None and v[3] for v in nvidia)
    assert {n.path for v in nvidia for n in v[4]} >= {"/dev/nvidiactl"}
    amd = [v for v in live.values() if v[2] == "amdgpu"]
    assert len(amd) == 2 and all(v[3] and "memory" in str(v[0].capacity) for v in amd)

    assert driver_view(capture_and_unpack(root, tmp_path)) == live
