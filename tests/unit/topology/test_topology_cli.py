"""`topodra inspect` and `topodra capture` on this machine's live /sys and on hand-made trees."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from topodra.common.topology.discover import discover
from topodra.drivers.accelerator import selection
from topodra.drivers.accelerator.options import AcceleratorOptions
from topodra.drivers.cli.main import main

from tests.kit.imports import forget_first
from tests.kit.sysfs import basic_machine
from tests.unit.topology.test_topology_pci import switch_machine

KEYS = {
    "cpus": {"id", "online", "package", "core", "numa_node"},
    "packages": {"id", "cpus"},
    "cores": {"package", "id", "cpus"},
    "numa_nodes": {"id", "cpus", "memory_bytes", "distances"},
    "caches": {"level", "type", "id", "size_bytes", "cpus"},
    "pci_devices": {
        "address", "class", "vendor", "device", "numa_node", "pcie_root", "bridges", "pcie_switch",
        "local_cpus", "driver",
    },
    "net_interfaces": {"name", "pci_address", "mac", "mtu", "speed_mbps", "operstate"},
}  # fmt: skip


def inspect_json(capsys: pytest.CaptureFixture[str], root: str) -> dict[str, object]:
    assert main(["inspect", "--output", "json", "--sysfs-root", root]) == 0
    doc: dict[str, object] = json.loads(capsys.readouterr().out)
    return doc


def live_sysfs() -> None:
    if not Path("/sys/devices/system/cpu").is_dir():
        pytest.skip("no live /sys here")


def test_live_json_has_the_promised_keys(capsys: pytest.CaptureFixture[str]) -> None:
    live_sysfs()
    doc = inspect_json(capsys, "/")
    assert set(KEYS) | {"warnings"} <= set(doc)
    for section, fields in KEYS.items():
        items = doc[section]
        assert isinstance(items, list)
        for item in items:
            assert fields <= set(item), (section, item)
    cpus = doc["cpus"]
    assert isinstance(cpus, list) and cpus, "this machine has CPUs"
    for p in doc["packages"]:  # type: ignore[attr-defined]
        assert p["cpus"] == sorted(p["cpus"])
    for c in doc["caches"]:  # type: ignore[attr-defined]
        assert c["type"] in ("data", "instruction", "unified")
    for p in doc["pci_devices"]:  # type: ignore[attr-defined]
        assert p["class"] is None or (p["class"].startswith("0x") and len(p["class"]) == 8)
        assert p["vendor"] is None or (p["vendor"].startswith("0x") and len(p["vendor"]) == 6)


def test_live_capture_round_trip(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    live_sysfs()
    # A live machine moves (a VM's MemTotal follows its balloon, links go up and down), so the
    # capture must match the machine as seen right around it; a few attempts absorb a change
    # landing in between, a real difference fails every time.
    attempts = []
    for i in range(3):
        archive = tmp_path / f"machine{i}.tar.xz"
        before = inspect_json(capsys, "/")
        assert main(["capture", "--file", str(archive)]) == 0
        capsys.readouterr()
        after = inspect_json(capsys, "/")
        with tarfile.open(archive) as tar:
            names = tar.getnames()
            assert all(n.startswith(("sys", "proc")) for n in names)
            assert all(not m.issym() or not m.linkname.startswith("/") for m in tar.getmembers())
            tar.extractall(tmp_path / f"unpacked{i}", filter="tar")
        unpacked = inspect_json(capsys, str(tmp_path / f"unpacked{i}"))
        if unpacked in (before, after):
            return
        attempts.append(unpacked)
    assert attempts[-1] == after


def test_capture_holds_only_what_discovery_reads(tmp_path: Path) -> None:
    tree = basic_machine(tmp_path / "m", cpus=2)
    tree.file("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "performance")
    tree.file("sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never")
    archive = tmp_path / "m.tar.xz"
    assert main(["capture", "--sysfs-root", str(tmp_path / "m"), "--file", str(archive)]) == 0
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert "sys/devices/system/cpu/cpu0/topology/core_cpus" in names
    assert not any("cpufreq" in n or "transparent_hugepage" in n for n in names)


@pytest.mark.parametrize("command", ["inspect", "capture"])
def test_not_a_sysfs_tree_is_one_message_and_status_2(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [command, "--sysfs-root", str(tmp_path)]
    if command == "capture":
        args += ["--file", str(tmp_path / "x.tar.xz")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a sysfs tree" in err and str(tmp_path) in err
    assert main([command, "--sysfs-root", str(tmp_path / "missing"), *args[3:]]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_a_capture_archive_as_root_says_how_to_unpack_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`topodra capture` writes a .tar.xz; handing it to --sysfs-root said only 'no such folder'."""
    basic_machine(tmp_path / "m", cpus=1)
    archive = tmp_path / "me.tar.xz"
    assert main(["capture", "--sysfs-root", str(tmp_path / "m"), "--file", str(archive)]) == 0
    capsys.readouterr()
    assert main(["inspect", "--sysfs-root", str(archive)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "is an archive" in line and f"tar -xf {archive} -C m" in line, line
    unpacked = tmp_path / "u"
    unpacked.mkdir()
    subprocess.run(["tar", "-xf", str(archive), "-C", str(unpacked)], check=True)
    assert main(["inspect", "--sysfs-root", str(unpacked)]) == 0


def test_sys_folder_itself_gets_a_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    basic_machine(tmp_path, cpus=1)
    assert main(["inspect", "--sysfs-root", str(tmp_path / "sys")]) == 2
    assert f"pass the folder that contains it ({tmp_path})" in capsys.readouterr().err


def test_text_view_shows_packages_pci_tree_and_locality(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    switch_machine(tmp_path)
    assert main(["inspect", "--sysfs-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Package 0 (id 0): CPUs 0-3" in out
    assert "NUMA node 1: CPUs 4-7" in out
    assert "L3 unified 16 MiB: [0-3]" in out
    assert "0000:01:00.0  PCI bridge" in out and "[switch 0000:01:00.0]" in out
    assert "ACC0" in out and "net eth0" in out and "dev card1,renderD129" in out
    matrix = out[out.index("\nLocality\n") :].splitlines()[1:]
    header = matrix[1].split()
    assert header[:3] == ["ACC0", "NIC0", "NIC1"] and header[3:] == ["CPU", "Affinity", "NUMA", "Affinity"]
    rows = {line.split()[0]: line.split()[1:] for line in matrix[2:5]}
    assert rows["ACC0"][:3] == ["X", "SW", "SYS"]
    assert rows["NIC1"][:3] == ["SYS", "SYS", "X"]


def test_inspect_lists_no_bmc_display_adapter_as_an_accelerator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """1s-4acc has an ASPEED BMC VGA (class 0x0300, card node only) besides four GPUs: inspect and
    the accelerator driver must agree that it is a screen, not an accelerator."""
    root = tmp_path / "m"
    assert main(["synth", "--spec", "1s-4acc", "--dest", str(root)]) == 0
    capsys.readouterr()
    assert main(["inspect", "--sysfs-root", str(root), "--only", "accelerators,other"]) == 0
    out = capsys.readouterr().out
    bmc = [line for line in out.splitlines() if "VGA compatible controller  [1a03:" in line]
    assert len(bmc) == 1, out
    assert "ACC" not in bmc[0] and "NIC" not in bmc[0]
    devices = out[out.index("\nDevices:\n") :].splitlines()[1:]
    listed = {line.split()[0]: line.split()[1] for line in devices if line.startswith("  ACC")}
    driver = {fn.address for fn in selection.selected(discover(root), AcceleratorOptions())}
    assert set(listed.values()) == driver and len(driver) == 4
    assert bmc[0].split()[0] not in listed.values()


@pytest.mark.parametrize("output", ["json", "text"])
def test_inspect_imports_no_grpc_kubernetes_or_yaml(tmp_path: Path, output: str) -> None:
    """Nor what only costs start-up time next to lstopo: dataclasses (with inspect and ast),
    typing, shutil (argparse's formatter asks it for the terminal width), weakref (the reader
    closes its descriptors without it) and ctypes (only a tree whose reads meet a link needs
    openat2), importlib (main imports the subcommand without it) and collections.abc (annotations
    only; checked by its own name, and dropped first like the roots: a site-packages .pth file
    can load it at start-up, as one does on the CI machine)."""
    basic_machine(tmp_path, cpus=2)
    roots = (
        "grpc",
        "kubernetes",
        "yaml",
        "google",
        "dataclasses",
        "inspect",
        "typing",
        "shutil",
        "weakref",
        "ctypes",
        "importlib",
    )
    code = forget_first(*roots) + (
        "sys.modules.pop('collections.abc', None)\n"
        "from topodra.drivers.cli.main import main\n"
        f"assert main(['inspect', '--output', {output!r}, '--sysfs-root', {str(tmp_path)!r}]) == 0\n"
        f"roots = {roots!r}\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in roots or m == 'collections.abc'\n"
        "               or (m.startswith('topodra.drivers.') and not m.startswith('topodra.drivers.cli')))\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
        "sys.exit(1 if heavy else 0)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    if output == "json":
        assert json.loads(res.stdout)["cpus"][0]["id"] == 0


def test_a_function_whose_place_is_unknown_has_no_chain_in_json_nor_locality_in_slices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bus entry that is a plain folder found nowhere under devices/: root and bridges unknown."""
    tree = switch_machine(tmp_path)
    lost = "sys/bus/pci/devices/0000:07:00.0"
    tree.file(f"{lost}/class", "0x030200").file(f"{lost}/vendor", "0x10de").file(f"{lost}/device", "0x20b0")
    tree.file(f"{lost}/numa_node", "-1")
    doc = inspect_json(capsys, str(tmp_path))
    by_address = {p["address"]: p for p in doc["pci_devices"]}  # type: ignore[attr-defined]
    assert by_address["0000:07:00.0"]["bridges"] is None  # unknown, not "directly on a root port"
    assert by_address["0000:07:00.0"]["pcie_root"] is None
    assert by_address["0000:07:00.0"]["pcie_switch"] is None
    assert by_address["0000:03:00.0"]["bridges"] == ["0000:00:01.0", "0000:01:00.0", "0000:02:00.0"]
    assert by_address["0000:00:01.0"]["bridges"] == []  # a root port: known, and empty

    assert main(["slices", "--driver", "accelerator", "--sysfs-root", str(tmp_path), "-o", "json"]) == 0
    devices = {
        d["name"]: d.get("attributes", {})
        for s in json.loads(capsys.readouterr().out)["items"]
        for d in s["spec"]["devices"]
    }
    lost_attrs, placed = devices["pci-0000-07-00-0"], devices["pci-0000-03-00-0"]
    assert "resource.kubernetes.io/pcieRoot" in placed and "topology.topodra.io/pcieSwitch" in placed
    assert not [k for k in lost_attrs if k.endswith(("/pcieRoot", "/pcieSwitch"))], lost_attrs


def test_slices_socket_follows_packages_resolved_from_contradicting_masks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.kit.sysfs import CPU, mask

    tree = basic_machine(tmp_path, cpus=8, packages=2)
    tree.file(f"{CPU}/cpu0/topology/package_cpus", mask([0, 1]))  # CPUs 1-3 and the ids say 0-3
    argv = ["slices", "--driver", "cpu", "--cpu-device-granularity", "core", "--sysfs-root", str(tmp_path)]
    # the shared pool is CPU 7 (by default it would be cpu0's core, the CPU whose mask contradicts)
    argv += ["--cpu-reserved-cpus", "7", "--cpu-shared-min", "0"]
    assert main([*argv, "-o", "json"]) == 0
    socket_of = {
        int(d["attributes"]["cpu.topodra.io/cpus"]["string"]): d["attributes"]["topology.topodra.io/socket"][
            "int"
        ]
        for s in json.loads(capsys.readouterr().out)["items"]
        for d in s["spec"]["devices"]
    }
    assert socket_of == {n: n // 4 for n in range(7)}  # two sockets, as the machine has


@pytest.mark.parametrize("output", ["json", "text"])
def test_inspect_gives_the_collector_back_to_its_caller(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    """inspect pauses the cyclic garbage collector while it runs (no pass over discovery's
    objects); called in-process (a test, a script) it leaves it as it found it, also on failure."""
    import gc

    from topodra.drivers.cli.main import build_parser

    basic_machine(tmp_path, cpus=64)  # enough objects for several passes of the collector
    args = build_parser("inspect").parse_args(["inspect", "-o", output, "--sysfs-root", str(tmp_path)])
    absent = build_parser("inspect").parse_args(["inspect", "--sysfs-root", str(tmp_path / "absent")])
    assert gc.isenabled()
    seen: list[str] = []
    gc.callbacks.append(lambda phase, info: seen.append(phase))
    try:
        assert args.run(args) == 0
        assert seen == [] and gc.isenabled()
        assert absent.run(absent) == 2
        assert gc.isenabled()
        gc.disable()
        assert args.run(args) == 0
        assert not gc.isenabled()  # nor turned on for a caller that had it off
    finally:
        gc.enable()
        gc.callbacks.pop()
    capsys.readouterr()
