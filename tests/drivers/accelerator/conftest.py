"""Fixtures for the accelerator driver: synthetic machines, private copies to edit, a pci.ids file,
and a dev root whose nodes are real character devices with the numbers sysfs gives.

Nodes are made with mknod under a temporary folder. Their majors (DRM 226, accel 261, NVIDIA
195, VFIO groups) have no driver on this test host, so a container that opens one gets ENXIO:
the path exists and carries the right numbers, and nothing is touched.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from topodra.common.synth import shipped_spec_names

from tests.conftest import skip_or_fail
from tests.kit.machines import SynthTree, synth_builder

SYNTH_NAMES = shipped_spec_names()

# A machine the shipped specs do not have: accelerator VFs (bound to vfio-pci, and to the PF's
# driver), a BMC display, a GPU behind a switch, a Gaudi bound to vfio-pci, and a root complex
# in a 5-hex-digit PCI domain (upstream refuses pciBusID there), with numa_node -1.
VF_SPEC = {
    "version": 1,
    "name": "acc-vfs",
    "cpu": {"sockets": 2, "cores_per_socket": 4, "threads_per_core": 2},
    "pci": {
        "profiles": {
            "mi210-sriov": {
                "extends": "mi210",
                "sriov": {"total_vfs": 4, "num_vfs": 2, "vf_device": "0x7410", "vf_driver": "vfio-pci"},
            },
            "mi210-vf-amdgpu": {
                "extends": "mi210",
                "sriov": {"total_vfs": 4, "num_vfs": 1, "vf_device": "0x7410"},
            },
            "gaudi2-vfio": {"extends": "gaudi2", "driver": "vfio-pci"},
        },
        "roots": [
            {
                "numa_node": 0,
                "integrated": [{"device": "spr-iio"}],
                "ports": [{"device": "ast2600"}, {"device": "mi210-sriov"}],
            },
            {
                "numa_node": 1,
                "ports": [{"switch": {"ports": [{"device": "mi210-vf-amdgpu"}, {"device": "gaudi2-vfio"}]}}],
            },
            {"numa_node": None, "domain": 65536, "bus": 0, "ports": [{"device": "gaudi2"}]},
        ],
    },
}
# A small box for tests that copy and edit a tree: two MI210s (amdgpu, render nodes, VRAM), three
# H100s behind one switch (nvidia, proc/driver/nvidia minors), a BMC display and a NIC.
GPU_BOX = {
    "version": 1,
    "name": "gpu-box",
    "cpu": {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1},
    "pci": {
        "roots": [
            {"numa_node": 0, "ports": [{"device": "mi210"}, {"device": "ast2600"}, {"device": "e810"}]},
            {"numa_node": 0, "ports": [{"device": "mi210"}]},
            {
                "numa_node": 0,
                "ports": [
                    {
                        "switch": {
                            "ports": [{"device": "h100-sxm"}, {"device": "h100-sxm"}, {"device": "h100-sxm"}]
                        }
                    }
                ],
            },
        ]
    },
}
CUSTOM = {"acc-vfs": VF_SPEC, "gpu-box": GPU_BOX}


@pytest.fixture(scope="session")
def synth_machine(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], SynthTree]:
    """A shipped (or this folder's custom) synthetic machine, built once per session."""
    return synth_builder(tmp_path_factory, "acc-synth", CUSTOM)


def copy_tree(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, symlinks=True)
    return dest


@pytest.fixture
def tree(synth_machine: Callable[[str], SynthTree], tmp_path: Path) -> Callable[[str], Path]:
    """A private copy of a synthetic machine that a test may edit."""

    def get(name: str) -> Path:
        return copy_tree(synth_machine(name).root, tmp_path / f"machine-{name}")

    return get


def fn_dir(root: Path, bdf: str) -> Path:
    return (root / "sys/bus/pci/devices" / bdf).resolve()


def write_pci_ids(path: Path, entries: Iterable[tuple[int, str, Iterable[tuple[int, str]]]]) -> Path:
    """A pci.ids file in the upstream format: vendor lines, tab-indented device lines."""
    lines = ["# test pci.ids", ""]
    for vendor, vname, devices in entries:
        lines.append(f"{vendor:04x}  {vname}")
        for device, dname in devices:
            lines.append(f"\t{device:04x}  {dname}")
            lines.append(f"\t\t{vendor:04x} {device:04x}  a subsystem line that must not be taken")
    lines += ["", "C 00  Unclassified device", "\t00  Non-VGA unclassified device"]
    path.write_text("\n".join(lines) + "\n")
    return path


def mknod_unavailable(where: Path) -> str | None:
    if os.geteuid() != 0:
        return "creating device nodes needs root"
    probe = where / ".mknod-probe"
    try:
        os.mknod(probe, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except OSError as e:
        return f"mknod is not possible here: {e}"
    probe.unlink()
    return None


def make_node(dev_root: Path, path: str, major: int, minor: int) -> Path:
    host = dev_root / path.lstrip("/")
    host.parent.mkdir(parents=True, exist_ok=True)
    if host.exists() or host.is_symlink():
        host.unlink()
    os.mknod(host, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    return host


def sysfs_nodes(root: Path) -> list[tuple[str, int, int]]:
    """Every DRM/accel/VFIO node the tree announces: (/dev path, major, minor) from its
    `dev` file and uevent DEVNAME, read here without the driver's code."""
    out = []
    for cls in ("drm", "accel", "vfio", "vfio-dev"):
        base = root / "sys/class" / cls
        if not base.is_dir():
            continue
        for entry in sorted(base.iterdir()):
            dev = entry / "dev"
            if not dev.is_file():
                continue
            major, minor = (int(x) for x in dev.read_text().strip().split(":"))
            devname = next(
                (
                    line.split("=", 1)[1]
                    for line in (entry / "uevent").read_text().splitlines()
                    if line.startswith("DEVNAME=")
                ),
                None,
            )
            if devname is None:
                devname = f"vfio/{entry.name}" if cls == "vfio" else entry.name
            out.append((f"/dev/{devname}", major, minor))
    return out


@pytest.fixture
def dev_root(tmp_path: Path) -> Callable[[Path], Path]:
    """Makes <tmp>/dev with a node for every node of a tree, numbers exactly as sysfs says,
    plus NVIDIA's and VFIO's fixed ones when the tree has NVIDIA or vfio-pci functions."""

    def make(root: Path) -> Path:
        d = tmp_path / "devroot"
        reason = mknod_unavailable(tmp_path)
        if reason:
            skip_or_fail(reason)
        for path, major, minor in sysfs_nodes(root):
            make_node(d, path, major, minor)
        gpus = root / "proc/driver/nvidia/gpus"
        if gpus.is_dir():
            for info in sorted(gpus.glob("*/information")):
                fields = dict(
                    (k.strip(), v.strip())
                    for k, _, v in (x.partition(":") for x in info.read_text().splitlines())
                )
                make_node(d, f"/dev/nvidia{fields['Device Minor']}", 195, int(fields["Device Minor"]))
            make_node(d, "/dev/nvidiactl", 195, 255)
        vfio = root / "sys/class/misc/vfio/dev"
        if vfio.is_file():
            major, minor = (int(x) for x in vfio.read_text().strip().split(":"))
            make_node(d, "/dev/vfio/vfio", major, minor)
        d.mkdir(exist_ok=True)
        return d

    return make


VFIO_GROUP_MAJOR = 243  # dynamic on real kernels; free on this test host


def add_vfio_groups(root: Path) -> dict[str, int]:
    """What the kernel shows once functions are bound to vfio-pci: sys/class/vfio/<group> with
    its `dev` numbers, and the container node sys/class/misc/vfio (10:196). Returns the group of
    each vfio-pci function."""
    groups: dict[str, int] = {}
    for entry in sorted((root / "sys/bus/pci/devices").iterdir()):
        try:
            if os.path.basename(os.readlink(entry / "driver")) != "vfio-pci":
                continue
            groups[entry.name] = int(os.path.basename(os.readlink(entry / "iommu_group")))
        except OSError:
            continue
    for i, group in enumerate(sorted(set(groups.values()))):
        d = root / "sys/class/vfio" / str(group)
        d.mkdir(parents=True, exist_ok=True)
        (d / "dev").write_text(f"{VFIO_GROUP_MAJOR}:{i}\n")
        (d / "uevent").write_text(f"MAJOR={VFIO_GROUP_MAJOR}\nMINOR={i}\nDEVNAME=vfio/{group}\n")
    if groups:
        misc = root / "sys/class/misc/vfio"
        misc.mkdir(parents=True, exist_ok=True)
        (misc / "dev").write_text("10:196\n")
        (misc / "uevent").write_text("MAJOR=10\nMINOR=196\nDEVNAME=vfio/vfio\n")
    return groups
