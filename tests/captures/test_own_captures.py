"""Machines we captured ourselves (tests/fixtures/captures): what topodra says of each must be what
other tools read on that machine.

Each capture comes with `<name>.readings.json`: values read on the machine by lscpu, nvidia-smi,
cat, ls and readlink, copied from their output (tests/fixtures/captures/README.md). Discovery,
the slices `topodra slices` prints, the accelerator driver's device nodes and `topodra check` are
held against those readings, and discovery against hwloc on the same tree. These fixtures are in
the repository, so these tests run everywhere, without ../shared.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from topodra.common.topology import discover
from topodra.drivers.accelerator.driver import AcceleratorDriver
from topodra.drivers.accelerator.options import AcceleratorOptions

from tests.conftest import REPO, skip_or_fail
from tests.kit import hwloc
from tests.unit.topology.test_topology_fixtures import check_against_hwloc

CAPTURES = REPO / "tests" / "fixtures" / "captures"
NAMES = sorted(p.name.removesuffix(".readings.json") for p in CAPTURES.glob("*.readings.json"))
NODE = "capture-node"


def cpus(text: str) -> list[int]:
    """lscpu's and sysfs's list form, read here without topodra's parser."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


@pytest.fixture(scope="module")
def machine(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> tuple[Path, dict[str, Any]]:
    name: str = request.param
    root = tmp_path_factory.mktemp(name)
    with tarfile.open(CAPTURES / f"{name}.tar.xz") as tar:
        tar.extractall(root, filter="tar")
    readings: dict[str, Any] = json.loads((CAPTURES / f"{name}.readings.json").read_text())
    return root, readings


def topodra(*args: str) -> str:
    cmd = [sys.executable, "-m", "topodra.drivers.cli.main", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@functools.cache
def slices_json(root: Path) -> str:
    """`topodra slices --driver all -o json` on the capture, run once per capture."""
    return topodra("slices", "--driver", "all", "--sysfs-root", str(root), "--node-name", NODE, "-o", "json")


def slices(root: Path) -> dict[str, list[dict[str, Any]]]:
    """Devices by driver, from `topodra slices --driver all` on the capture."""
    doc = json.loads(slices_json(root))
    out: dict[str, list[dict[str, Any]]] = {}
    for s in doc["items"]:
        out.setdefault(s["spec"]["driver"], []).extend(s["spec"]["devices"])
    return out


def attr(device: dict[str, Any], name: str) -> Any:
    value = device["attributes"].get(name)
    return None if value is None else next(iter(value.values()))


EACH = pytest.mark.parametrize("machine", NAMES, indirect=True)


def test_there_is_a_capture() -> None:
    assert NAMES, f"no *.readings.json in {CAPTURES}"


@EACH
def test_cpus_caches_and_numa_are_what_lscpu_read(machine: tuple[Path, dict[str, Any]]) -> None:
    root, readings = machine
    lscpu = readings["lscpu"]
    t = discover(root)
    assert list(t.usable_cpus()) == cpus(lscpu["cpus"])
    assert len(t.packages) == lscpu["sockets"]
    assert len(t.cores) == lscpu["sockets"] * lscpu["cores_per_socket"]
    assert {len(c.cpus) for c in t.cores} == {lscpu["threads_per_core"]}
    assert {str(n.id): list(n.cpus) for n in t.numa_nodes} == {
        k: cpus(v) for k, v in lscpu["numa_nodes"].items()
    }
    names = {(1, "data"): "L1d", (1, "instruction"): "L1i", (2, "unified"): "L2", (3, "unified"): "L3"}
    seen: dict[str, list[int]] = {}
    for c in t.caches:
        seen.setdefault(names[(c.level, c.type)], []).append((c.size_bytes or 0) // 1024)
    assert {k: len(v) for k, v in seen.items()} == lscpu["cache_instances"]
    assert {k: sorted(set(v)) for k, v in seen.items()} == {
        k: [v] for k, v in lscpu["cache_kib_each"].items()
    }


@EACH
def test_pci_functions_are_what_the_kernel_listed(machine: tuple[Path, dict[str, Any]]) -> None:
    root, readings = machine
    t = discover(root)
    got = {p.address: p for p in t.pci_devices}
    assert sorted(got) == sorted(r["bdf"] for r in readings["pci"])
    for r in readings["pci"]:
        p = got[r["bdf"]]
        hops = r["path"].removeprefix("/sys/devices/").split("/")
        assert (p.root_bus, list(p.bridges or []), p.driver) == (hops[0], hops[1:-1], r["driver"]), r["bdf"]
        assert (p.class_code, p.vendor, p.device) == (
            int(r["class"], 16),
            int(r["vendor"], 16),
            int(r["device"], 16),
        )
        assert p.numa_node == (None if r["numa_node"] == -1 else r["numa_node"]), r["bdf"]
        assert list(p.local_cpus) == cpus(r["local_cpulist"]), r["bdf"]
    net = {i.name: i.pci_address for i in t.net_interfaces}
    assert net == readings["sys_class_net"]


@EACH
@pytest.mark.hwloc
def test_discovery_agrees_with_hwloc(machine: tuple[Path, dict[str, Any]]) -> None:
    if not hwloc.available():
        skip_or_fail("lstopo-no-graphics (Debian package hwloc) is not installed")
    check_against_hwloc(machine[0])


@EACH
def test_the_accelerators_are_the_gpus_nvidia_smi_lists(machine: tuple[Path, dict[str, Any]]) -> None:
    root, readings = machine
    paths = {r["bdf"]: r["path"] for r in readings["pci"]}
    published = {
        attr(d, "resource.kubernetes.io/pciBusID"): d for d in slices(root)["accelerator.topodra.io"]
    }
    smi = {g["pci.bus_id"][4:].lower(): g for g in readings["nvidia_smi"]}  # 8-hex domain -> 4
    assert sorted(published) == sorted(smi)
    for bdf, gpu in smi.items():
        d = published[bdf]
        ids, sub = int(gpu["pci.device_id"], 16), int(gpu["pci.sub_device_id"], 16)
        assert attr(d, "accelerator.topodra.io/vendorId") == f"0x{ids & 0xFFFF:04x}"
        assert attr(d, "accelerator.topodra.io/deviceId") == f"0x{ids >> 16:04x}"
        assert attr(d, "accelerator.topodra.io/subsystemVendorId") == f"0x{sub & 0xFFFF:04x}"
        assert attr(d, "accelerator.topodra.io/subsystemDeviceId") == f"0x{sub >> 16:04x}"
        assert attr(d, "resource.kubernetes.io/pcieRoot") == paths[bdf].split("/")[3]
        # nvidia-smi's NUMA affinity is the node of the GPU's CPUs; the kernel's numa_node is -1,
        # and the standard attribute is published only from the kernel's value (never -1)
        numa = next(r["numa_node"] for r in readings["pci"] if r["bdf"] == bdf)
        assert attr(d, "resource.kubernetes.io/numaNode") == (None if numa == -1 else numa)


@EACH
def test_the_driver_hands_out_the_nodes_the_machine_has(machine: tuple[Path, dict[str, Any]]) -> None:
    root, readings = machine
    d = AcceleratorDriver(AcceleratorOptions(sysfs_root=root, node_name=NODE, dev_root=Path("/")))
    accs = {a.address: a for a in d.accelerators().values()}
    for bdf, info in readings["proc_driver_nvidia"].items():
        a = accs[bdf]
        assert a.problem is None
        nodes = {n.path: f"c {n.major}:{n.minor}" for n in (*a.nodes, *a.shared_nodes)}
        assert (
            nodes[f"/dev/nvidia{info['Device Minor']}"]
            == readings["dev"][f"/dev/nvidia{info['Device Minor']}"]
        )
        assert nodes == {p: readings["dev"][p] for p in nodes}


@EACH
def test_check_finds_the_slices_true_to_the_machine(
    machine: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    root, readings = machine
    doc = tmp_path / "slices.json"
    doc.write_text(slices_json(root))
    report = json.loads(topodra("check", "--slices", str(doc), "--sysfs-root", str(root), "-o", "json"))
    assert report["summary"]["errors"] == 0 and report["summary"]["warnings"] == 0
    assert report["machine"]["cpus"] == len(cpus(readings["lscpu"]["cpus"]))
    assert report["machine"]["pciFunctions"] == len(readings["pci"])
