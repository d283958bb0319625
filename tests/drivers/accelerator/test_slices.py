"""Slices for every captured and every synthetic machine are valid and true.

Valid: the publisher's validation drops nothing and `kubernetes-validate --strict` accepts each
ResourceSlice (1.34 and 1.37 schemas), with and without taints. True: every accelerator of the
tree is present, no console/BMC/emulated adapter is, and attribute values equal what the
fixture's expected.json or the synthetic manifest says and what the raw sysfs files say
(truth.py), not only what our own discovery says.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from topodra.drivers.accelerator import selection
from topodra.drivers.accelerator.devices import DRIVER, Accelerator
from topodra.drivers.accelerator.driver import AcceleratorDriver
from topodra.drivers.accelerator.options import AcceleratorOptions, parse_ids

from tests.conftest import REPO, FixtureTrees, fixture_names
from tests.drivers.accelerator import truth
from tests.drivers.accelerator.conftest import CUSTOM, SYNTH_NAMES, SynthTree, fn_dir, write_pci_ids


def accelerators(root: Path, **kw: Any) -> dict[str, Accelerator]:
    d = AcceleratorDriver(AcceleratorOptions(sysfs_root=root, **kw))
    got: dict[str, Accelerator] = d.accelerators()
    return got


def slices_cli(root: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "topodra.drivers.cli.main", "slices", "--driver", "accelerator"]
    cmd += ["--sysfs-root", str(root), "--output", "json", *flags]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=60)


def expected_accelerator(root: Path, p: dict[str, object]) -> bool:
    """The issue's rule applied to an expected.json entry plus the raw tree."""
    cls, vendor, bdf = str(p["class"]), int(str(p["vendor"]), 16), str(p["bdf"])
    if cls.startswith("12") or cls == "0b40":
        return True
    if not cls.startswith("03"):
        return False
    if vendor in truth.CONSOLE_VENDORS:
        return False
    return cls == "0302" or truth.has_compute_interface(root, bdf)


# --- captured machines --------------------------------------------------------------------------


@pytest.mark.parametrize("name", fixture_names())
def test_captured_machine_slices_are_valid_and_true(fixture_trees: FixtureTrees, name: str) -> None:
    root = fixture_trees.root(name)
    expected = truth.load(fixture_trees.expected(name))
    accs = accelerators(root)
    truth.assert_valid([a.device for a in accs.values()])
    by_address = {a.address: a for a in accs.values()}
    numa_cpus = {n["id"]: n["cpus"] for n in expected.get("numa", [])}
    want = [p for p in expected["pci"] if expected_accelerator(root, p)]
    for p in want:
        acc = by_address.get(p["bdf"])
        assert acc is not None, f"accelerator {p['bdf']} (class {p['class']}) is not published"
        cpus = numa_cpus.get(p["numa"]) or p["local_cpus"]
        truth.check_pci_truth(root, acc, p, truth.socket_index(expected["packages"], cpus))
    assert set(by_address) == {p["bdf"] for p in want}
    for p in expected["pci"]:  # never a console adapter, whatever it carries
        if p["class"].startswith("03") and int(p["vendor"], 16) in truth.CONSOLE_VENDORS:
            assert p["bdf"] not in by_address


def test_the_captured_machines_hold_what_the_rules_are_about(fixture_trees: FixtureTrees) -> None:
    """The fixtures cover each rule at least once: a 3D controller bound to nvidia, eight NEC
    Vector Engines (co-processors, with their /dev/veN nodes and memory), and display adapters
    that must be skipped (virtio-gpu, Cirrus, Matrox, a Radeon with only a card node)."""
    cases = {
        "ghw--linux-amd64-accel-nvidia": ({"0000:06:00.0"}, {"0000:04:00.0"}),
        "hwloc--32intel64-2p8co2t+8ve": ({"0000:1b:00.0", "0000:41:00.0"}, set()),
        "hwloc--2pa-pcidomain32bits": (set(), {"0000:00:02.0"}),
        "hwloc--40intel64-2g2n4c+pcilocality": (set(), {"0000:09:03.0"}),
        "ghw--linux-amd64-amd-ryzen-1600": (set(), {"0000:0a:00.0"}),
    }
    for name, (present, absent) in cases.items():
        if name not in fixture_names():
            pytest.skip(f"{name} is not among the fixtures")
        got = {a.address: a for a in accelerators(fixture_trees.root(name)).values()}
        assert present <= set(got), name
        assert not absent & set(got), name
    ve = accelerators(fixture_trees.root("hwloc--32intel64-2p8co2t+8ve"))["pci-0000-1b-00-0"]
    assert ve.device.attributes[f"{DRIVER}/type"] == "coprocessor"
    assert [n.path for n in ve.nodes] == ["/dev/ve0"]
    assert ve.device.capacity[f"{DRIVER}/memory"].value == str(48 * 2**30)
    gpu = accelerators(fixture_trees.root("ghw--linux-amd64-accel-nvidia"))["pci-0000-06-00-0"]
    # no proc/driver/nvidia in that capture: published, but prepare must refuse, saying why
    assert gpu.problem is not None and "Device Minor" in gpu.problem


# --- synthetic machines -------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*SYNTH_NAMES, *CUSTOM])
def test_synthetic_machine_slices_are_valid_and_true(
    synth_machine: Callable[[str], SynthTree], name: str
) -> None:
    tree = synth_machine(name)
    m = tree.manifest
    root = tree.root
    accs = accelerators(root)
    truth.assert_valid([a.device for a in accs.values()])
    by_address = {a.address: a for a in accs.values()}
    numa_cpus = {n["id"]: n["cpus"] for n in m["numa"]}
    want = [p for p in m["pci"] if p["kind"] == "accelerator" and p["role"] in ("endpoint", "vf")]
    if name != "256cpu":
        assert want, "every other machine here has accelerators"
    for p in want:
        acc = by_address.get(p["bdf"])
        assert acc is not None, f"{p['bdf']} ({p['role']}) is not published"
        truth.check_pci_truth(root, acc, p, truth.socket_index(m["packages"], numa_cpus.get(p["numa"], [])))
        a = acc.device.attributes
        assert a.get(f"{DRIVER}/kernelDriver") == p["driver"]
        assert a.get(f"{DRIVER}/iommuGroup") == p["iommu_group"]
        assert a.get(f"{truth.TOPO}/pcieSwitch") == p["pcie_switch"]
        assert a.get(f"{truth.TOPO}/pcieLeafSwitch") == truth.leaf_switch(p)
        if p["role"] == "vf":
            assert a[f"{DRIVER}/sriovPhysicalFunction"] == p["physfn"]
            pf = next(q for q in m["pci"] if q["bdf"] == p["physfn"])
            assert a[f"{DRIVER}/sriovVfIndex"] == pf["virtfns"].index(p["bdf"])
        elif p["sriov_totalvfs"]:
            assert a[f"{DRIVER}/sriovRole"] == "pf"
            assert a[f"{DRIVER}/sriovTotalVfs"] == p["sriov_totalvfs"]
            assert a[f"{DRIVER}/sriovNumVfs"] == len(p["virtfns"])
        if p["link"] and p["role"] != "vf":
            assert a[f"{DRIVER}/pcieLinkWidth"] == p["link"]["width"]
        # the manifest's node names, as the pod will see them
        declared = [f"/dev/dri/{n}" for n in p["drm"] if n.startswith("render")]
        declared += [f"/dev/dri/{n}" for n in p["drm"] if n.startswith("card")]
        declared += [f"/dev/accel/{p['accel']}"] if p["accel"] else []
        assert [n.path for n in acc.nodes][: len(declared)] == declared
    assert set(by_address) == {p["bdf"] for p in want}
    for p in m["pci"]:
        if p["kind"] == "display":
            assert p["bdf"] not in by_address, f"display adapter {p['bdf']} must not be published"


def test_nvidia_gpus_get_their_minor_nodes_and_the_shared_ones(
    synth_machine: Callable[[str], SynthTree],
) -> None:
    root = synth_machine("2s-8acc-8nic").root
    accs = accelerators(root)
    gpus = [a for a in accs.values() if a.driver == "nvidia"]
    assert len(gpus) == 8
    for a in gpus:
        info = (root / "proc/driver/nvidia/gpus" / a.address / "information").read_text()
        minor = int(re.search(r"Device Minor:\s*(\d+)", info).group(1))  # type: ignore[union-attr]
        assert [(n.path, n.major, n.minor) for n in a.nodes if "nvidia" in n.path] == [
            (f"/dev/nvidia{minor}", 195, minor)
        ]
        shared = {n.path: n for n in a.shared_nodes}
        assert (shared["/dev/nvidiactl"].major, shared["/dev/nvidiactl"].minor) == (195, 255)
        assert shared["/dev/nvidia-uvm"].optional and shared["/dev/nvidia-uvm-tools"].optional
        assert a.problem is None


def test_vfio_bound_functions_get_their_group_and_the_container_node(
    synth_machine: Callable[[str], SynthTree], tmp_path: Path
) -> None:
    from tests.drivers.accelerator.conftest import add_vfio_groups, copy_tree

    root = copy_tree(synth_machine("acc-vfs").root, tmp_path / "m")
    groups = add_vfio_groups(root)
    accs = {a.address: a for a in accelerators(root).values()}
    assert set(groups) == {"0000:03:00.1", "0000:03:00.2", "0000:08:00.0"}
    for address, group in groups.items():
        a = accs[address]
        paths = [n.path for n in a.nodes]
        assert f"/dev/vfio/{group}" in paths
        assert [n.path for n in a.shared_nodes] == ["/dev/vfio/vfio"]
        assert (a.shared_nodes[0].major, a.shared_nodes[0].minor) == (10, 196)
        # display-class VFs have no render node: the VFIO group is their compute interface
        if address != "0000:08:00.0":
            assert a.reason.startswith("display controller bound to vfio-pci")


def test_five_hex_digit_domains_get_no_pci_bus_id(synth_machine: Callable[[str], SynthTree]) -> None:
    accs = accelerators(synth_machine("acc-vfs").root)
    vmd = accs["pci-10000-01-00-0"].device.attributes
    assert "resource.kubernetes.io/pciBusID" not in vmd
    assert vmd[f"{DRIVER}/pciAddress"] == "10000:01:00.0"
    assert "resource.kubernetes.io/numaNode" not in vmd  # numa_node -1


def test_bmc_display_is_never_published_even_with_a_render_node(
    synth_machine: Callable[[str], SynthTree], tmp_path: Path
) -> None:
    """The console table wins over the render-node rule (virtio-gpu with virgl, vmwgfx and an
    ASPEED given a render node all have one)."""
    from tests.drivers.accelerator.conftest import copy_tree

    root = copy_tree(synth_machine("gpu-box").root, tmp_path / "m")
    m = json.loads((root / "synth-manifest.json").read_text())
    (bmc,) = [p["bdf"] for p in m["pci"] if p["kind"] == "display"]
    render = fn_dir(root, bmc) / "drm" / "renderD200"
    render.mkdir(parents=True)
    (render / "dev").write_text("226:200\n")
    accs = accelerators(root)
    assert all(a.address != bmc for a in accs.values())
    fn = next(v for v in selection.verdicts(_topo(root), AcceleratorOptions()) if v.function.address == bmc)
    assert not fn.selected and "ASPEED" in fn.reason


def _topo(root: Path):  # type: ignore[no-untyped-def]
    from topodra.common.topology import discover

    return discover(root)


# --- operator ids ---------------------------------------------------------------------------------


def test_include_narrows_and_exact_ids_add_what_the_class_rules_skip(
    synth_machine: Callable[[str], SynthTree],
) -> None:
    root = synth_machine("1s-4acc").root
    every = accelerators(root)
    assert len(every) == 4
    amd_only = accelerators(root, include=tuple(parse_ids("1002:*")))
    assert set(amd_only) == set(every)
    none = accelerators(root, include=tuple(parse_ids("10de:*")))
    assert none == {}
    # the BMC by its exact id: the operator wins over the console table
    with_bmc = accelerators(root, include=tuple(parse_ids("1002:*,1a03:2000")))
    assert set(with_bmc) - set(every) == {"pci-0000-04-00-0"}
    bmc = with_bmc["pci-0000-04-00-0"]
    assert bmc.device.attributes[f"{DRIVER}/vendorId"] == "0x1a03"
    assert "named by --accelerator-include 1a03:2000" in bmc.reason
    # an NVMe drive named exactly is published too (an FPGA in an odd class is the real case)
    nvme = accelerators(root, include=tuple(parse_ids("144d:a80a")))
    assert len(nvme) == 1 and next(iter(nvme.values())).device.attributes[f"{DRIVER}/type"] == "other"


def test_exclude_wins_over_everything(synth_machine: Callable[[str], SynthTree]) -> None:
    root = synth_machine("acc-vfs").root
    every = accelerators(root)
    no_vfs = accelerators(root, exclude=tuple(parse_ids("1002:7410")))
    assert {a.address for a in every.values()} - {a.address for a in no_vfs.values()} == {
        "0000:03:00.1",
        "0000:03:00.2",
        "0000:07:00.1",
    }
    none = accelerators(root, include=tuple(parse_ids("1da3:1020")), exclude=tuple(parse_ids("1da3:*")))
    assert none == {}


# --- product names ----------------------------------------------------------------------------------


def test_product_names_come_from_pci_ids_and_are_cut_to_64_bytes(
    synth_machine: Callable[[str], SynthTree], tmp_path: Path
) -> None:
    long_name = "Instinct MI210 " + "with a name far longer than the API's sixty-four characters"
    ids = write_pci_ids(
        tmp_path / "pci.ids",
        [(0x1002, "Advanced Micro Devices, Inc. [AMD/ATI]", [(0x740F, long_name)])],
    )
    accs = accelerators(synth_machine("1s-4acc").root, pci_ids=(str(ids),))
    names = {a.device.attributes.get(f"{DRIVER}/productName") for a in accs.values()}
    (name,) = names
    assert isinstance(name, str) and len(name.encode()) <= 64
    assert name.startswith("Advanced Micro Devices, Inc. [AMD/ATI] Instinct MI210")
    assert f"Advanced Micro Devices, Inc. [AMD/ATI] {long_name}".startswith(name)
    # without a database that knows them: no attribute, nothing invented
    missing = accelerators(synth_machine("1s-4acc").root, pci_ids=(str(tmp_path / "absent.ids"),))
    assert all(f"{DRIVER}/productName" not in a.device.attributes for a in missing.values())


# --- the CLI ------------------------------------------------------------------------------------------


def test_topodra_slices_prints_valid_slices_for_the_accelerator_driver(
    synth_machine: Callable[[str], SynthTree],
) -> None:
    root = synth_machine("2s-8acc-8nic").root
    out = slices_cli(root, "--accelerator-exclude", "10de:2330")
    assert out.returncode == 0, out.stderr
    # every accelerator of this machine is an H100: one empty slice keeps the pool
    (empty,) = json.loads(out.stdout)["items"]
    assert empty["spec"]["devices"] == [] and empty["spec"]["driver"] == DRIVER
    out = slices_cli(root)
    assert out.returncode == 0, out.stderr
    slices = json.loads(out.stdout)["items"]
    names = [d["name"] for s in slices for d in s["spec"]["devices"]]
    assert len(names) == 8 and all(s["spec"]["driver"] == DRIVER for s in slices)
    bad = slices_cli(root, "--accelerator-include", "10de:2330,nvidia")
    assert bad.returncode == 2
    assert "argument --accelerator-include: 'nvidia' is not vendor:device" in bad.stderr
