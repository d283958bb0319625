"""NIC VFs bound to vfio-pci (a VM in a pod): the group's node is a key to every function of the
IOMMU group, so two claims never hold functions of one group (common/runtime/vfio.py). A
synthetic machine whose two VFs the test puts in one group, as a device without ACS has them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from topodra.common.runtime import vfio
from topodra.common.runtime.driver import AllocatedDevice, PrepareError

from tests.drivers.accelerator.conftest import add_vfio_groups
from tests.drivers.nic.test_nic_driver import NODE, driver_for
from tests.kit.claims import claim_ref as claim
from tests.kit.machines import SynthTree, synth_builder

SPEC = {
    "version": 1,
    "name": "nic-vfio",
    "cpu": {"sockets": 1, "cores_per_socket": 2, "threads_per_core": 1},
    "pci": {
        "profiles": {
            "e810-vfio": {
                "extends": "e810",
                "sriov": {"total_vfs": 4, "num_vfs": 2, "vf_driver": "vfio-pci"},
            },
        },
        "roots": [{"numa_node": 0, "ports": [{"device": "e810-vfio"}]}],
    },
}


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> SynthTree:
    build: Callable[[str], SynthTree] = synth_builder(tmp_path_factory, "nic-vfio", {"nic-vfio": SPEC})
    return build("nic-vfio")


def test_group_nodes_are_the_numbered_ones() -> None:
    paths = ["/dev/vfio/vfio", "/dev/vfio/12", "/dev/vfio/devices/vfio0", "/dev/vfio/noiommu-3"]
    paths.append("/dev/vfio/12x")
    assert vfio.group_nodes(paths) == {"/dev/vfio/12", "/dev/vfio/noiommu-3"}
    assert vfio.shared_group(["/dev/vfio/12"], [("a", ["/dev/vfio/13"]), ("b", ["/dev/vfio/12"])]) == (
        "b",
        "/dev/vfio/12",
    )
    assert vfio.shared_group(["/dev/infiniband/uverbs0"], [("a", ["/dev/infiniband/uverbs0"])]) is None


def test_two_claims_never_share_a_vfio_group(machine: SynthTree, tmp_path: Path) -> None:
    root = tmp_path / "m"
    shutil.copytree(machine.root, root, symlinks=True)
    fns = root / "sys/bus/pci/devices"
    vfs = sorted(p.name for p in fns.iterdir() if (p / "physfn").exists())[:2]  # the first port's 2 VFs
    assert len(vfs) == 2
    (fns / vfs[1] / "iommu_group").unlink()
    (fns / vfs[1] / "iommu_group").symlink_to(os.readlink(fns / vfs[0] / "iommu_group"))
    group = add_vfio_groups(root)[vfs[0]]
    d = driver_for(root, tmp_path)
    names = ["pci-" + v.replace(":", "-").replace(".", "-") for v in vfs]
    first = claim("first")
    held = d.prepare(first, [AllocatedDevice("nic", NODE, names[0])], [])
    with pytest.raises(
        PrepareError,
        match=f"device {names[1]} is in the IOMMU group of {names[0]} of claim ns1/first "
        f"\\(/dev/vfio/{group}\\): whoever opens the group reaches both",
    ):
        d.prepare(claim("second"), [AllocatedDevice("nic", NODE, names[1])], [])
    assert {name: h[0] for name, h in d.held().items()} == {names[0]: first}
    d.unprepare(first, held)
    second = claim("second")
    d.unprepare(second, d.prepare(second, [AllocatedDevice("nic", NODE, names[1])], []))
