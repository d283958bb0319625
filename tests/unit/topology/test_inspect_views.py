"""`topodra inspect` answers "what goes with what" on the synthetic machines: every matrix code is
the attribute the drivers really publish for both devices, the legend explains every code, the
64-accelerator/300-VF machine stays readable, --only filters, names come from the class code
(and pci.ids when given), colour follows the terminal, and the SVG is well-formed and complete.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from topodra.common.topology.discover import discover
from topodra.common.topology.locality import LEVELS, Locality, locality
from topodra.common.topology.parse import compress
from topodra.drivers.cli.inspect_view import build
from topodra.drivers.cli.main import main

from tests.conftest import REPO
from tests.kit.machines import SynthTree, synth_builder

# the codes after LEAF, closest first, each with the attribute both devices publish at it
ATTRIBUTE_ORDER = (
    (Locality.SW, "topology.topodra.io/pcieSwitch"),
    (Locality.ROOT, "resource.kubernetes.io/pcieRoot"),
    (Locality.NUMA, "resource.kubernetes.io/numaNode"),
    (Locality.SOCK, "topology.topodra.io/socket"),
)
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> object:
    return synth_builder(tmp_path_factory, "inspect")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["inspect", *argv]) == 0
    out: str = capsys.readouterr().out
    return out


def published_attributes(root: Path) -> dict[str, dict[str, object]]:
    """pciBusID -> the attributes the accelerator and NIC drivers publish (their own code)."""
    argv = [sys.executable, "-m", "topodra.drivers.cli.main", "slices", "--driver", "all"]
    argv += ["--sysfs-root", str(root), "--node-name", "n1", "-o", "json", "--nic-allow-uplink"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode in (0, 3), done.stderr
    out: dict[str, dict[str, object]] = {}
    for s in json.loads(done.stdout)["items"]:
        for d in s["spec"].get("devices") or []:
            attrs = {k: next(iter(v.values())) for k, v in d.get("attributes", {}).items()}
            bus = attrs.get("resource.kubernetes.io/pciBusID")
            if isinstance(bus, str):
                out[bus] = attrs
    return out


@pytest.mark.parametrize("name", ["2s-8acc-8nic", "2s-8acc-8nic-snc2", "1s-4acc", "2s-8acc-8nic-pxb"])
def test_every_code_is_the_attribute_both_devices_publish(machines: object, name: str) -> None:
    """LEAF where the synthetic plan puts the two below one leaf switch that is not the
    outermost switch (its manifest, from the roles it gave the bridges: nested switches only);
    every other code is the closest attribute both devices publish."""
    tree: SynthTree = machines(name)  # type: ignore[operator]
    topo = discover(tree.root)
    view = build(topo)
    published = published_attributes(tree.root)
    planned = {p["bdf"]: p for p in tree.manifest["pci"]}
    items = [i for i in view.matrix_items() if i.fn.address in published]
    assert len(items) >= 5
    seen = set()
    leaf_pairs: set[frozenset[str]] = set()
    for a in items:
        for b in items:
            level = locality(topo, a.fn, b.fn)
            seen.add(level)
            if level is Locality.SELF:
                continue
            pa, pb = published[a.fn.address], published[b.fn.address]
            ma, mb = planned[a.fn.address], planned[b.fn.address]
            leaf = ma["pcie_leaf_switch"]
            if leaf is not None and leaf == mb["pcie_leaf_switch"] != ma["pcie_switch"]:
                expected_level = Locality.LEAF
                leaf_pairs.add(frozenset((a.label, b.label)))
            else:
                shared = [lv for lv, key in ATTRIBUTE_ORDER if key in pa and pa.get(key) == pb.get(key)]
                expected_level = shared[0] if shared else Locality.SYS
            assert level is expected_level, (a.label, b.label)
            info = LEVELS[level]
            if info.attribute is not None:
                assert pa[info.attribute] == pb[info.attribute]
    expected = {Locality.SELF, Locality.NUMA}
    if name != "1s-4acc":  # its accelerators sit on root ports
        expected.add(Locality.SW)
    if name == "2s-8acc-8nic-snc2":
        expected.add(Locality.SOCK)  # two NUMA nodes per socket
    if name == "2s-8acc-8nic-pxb":
        expected.add(Locality.LEAF)  # a GPU and the NIC on its leaf switch; SW across leaves
        # NIC0 and NIC1 are the onboard ports; each leaf holds one GPU and the next NIC
        assert leaf_pairs == {frozenset((f"ACC{i}", f"NIC{i + 2}")) for i in range(8)}
    else:
        assert Locality.LEAF not in seen and not leaf_pairs
    assert expected <= seen


def test_legend_explains_every_code_with_its_attribute_and_nvidia_smi(
    machines: object, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(capsys, "--sysfs-root", str(machines("2s-8acc-8nic").root))  # type: ignore[operator]
    legend = out[out.index("\nLegend") :]
    for info in LEVELS.values():
        assert re.search(rf"^  {info.code}\s+\S", legend, re.M), info.code
        if info.attribute:
            assert f"matchAttribute: {info.attribute}" in legend
    for code in ("PIX", "PXB", "PHB", "NODE", "SYS"):
        assert code in legend


def test_matrix_has_cpu_and_numa_affinity_and_names_nics_by_netdev_and_rdma(
    machines: object, capsys: pytest.CaptureFixture[str]
) -> None:
    tree: SynthTree = machines("2s-8acc-8nic")  # type: ignore[operator]
    out = run(capsys, "--sysfs-root", str(tree.root))
    topo = discover(tree.root)
    lines = out[out.index("\nLocality\n") :].splitlines()
    assert lines[2].rstrip().endswith("CPU Affinity        NUMA Affinity")
    view = build(topo)
    for item in view.matrix_items():
        (row,) = [line for line in lines if line.startswith(item.label + " ")]
        assert row.split()[-2:] == [compress(item.fn.local_cpus), str(item.fn.numa_node)]
    devices = out[out.index("\nDevices:\n") :]
    for nic in [i for i in view.items if i.kind == "nics"]:
        (line,) = [x for x in devices.splitlines() if x.startswith(f"  {nic.label} ")]
        assert nic.nets and all(n in line for n in nic.nets)
        assert nic.rdma and all(r in line for r in nic.rdma)
        assert "Gb/s" in line


def test_the_64_accelerator_300_vf_machine_stays_readable(
    machines: object, capsys: pytest.CaptureFixture[str]
) -> None:
    tree: SynthTree = machines("64acc-300vf")  # type: ignore[operator]
    out = run(capsys, "--sysfs-root", str(tree.root))
    lines = out.splitlines()
    assert max(len(x) for x in lines) <= 160 and len(lines) <= 500, (max(len(x) for x in lines), len(lines))
    groups = out[out.index("What sits together") : out.index("Locality matrix: left out")]
    assert len(re.findall(r"^ +ACC\d+ ", groups, re.M)) == 64
    assert groups.count("+ 15 VFs") == 20
    assert len(re.findall(r"PCIe switch [0-9a-f:.]+  topology\.topodra\.io/pcieSwitch=", groups)) == 16
    for sw in re.findall(r"PCIe switch ([0-9a-f:.]+)  ", groups):
        block = groups[groups.index(f"PCIe switch {sw}") :].split("PCIe switch", 2)[1]
        assert len(re.findall(r"ACC\d+ ", block)) == 4 and len(re.findall(r"NIC\d+ ", block)) == 1
    wide = run(capsys, "--sysfs-root", str(tree.root), "-o", "wide")
    topo = discover(tree.root)
    vfs = [p for p in topo.pci_devices if p.sriov is not None and p.sriov.role == "vf"]
    assert len(vfs) == 300 and all(vf.address in wide for vf in vfs)
    assert "\nLocality\n" in wide


def test_only_filters_sections_and_kinds(machines: object, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(machines("2s-8acc-8nic").root)  # type: ignore[operator]
    out = run(capsys, "--sysfs-root", root, "--only", "accelerators,nics")
    assert "Package 0" not in out and "STO" not in out and "DEV0" not in out and "NVMe" not in out
    assert "ACC7" in out and "NIC9" in out
    out = run(capsys, "--sysfs-root", root, "--only", "accelerator")
    assert "ACC0" in out and "NIC0" not in out and "Ethernet" not in out
    out = run(capsys, "--sysfs-root", root, "--only", "cpus")
    assert "Package 0" in out and "PCI devices" not in out
    doc = json.loads(run(capsys, "--sysfs-root", root, "--only", "nics", "-o", "json"))
    assert "cpus" not in doc and doc["pci_devices"]
    assert {p["class"][:4] for p in doc["pci_devices"]} == {"0x02"}
    with pytest.raises(SystemExit) as exit_:
        main(["inspect", "--sysfs-root", root, "--only", "gpus"])
    assert exit_.value.code == 2
    assert "argument --only: 'gpus' is not one of cpus, accelerators" in capsys.readouterr().err


def test_class_names_without_pci_ids_and_product_names_with_it(
    machines: object, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = str(machines("2s-8acc-8nic").root)  # type: ignore[operator]
    empty = tmp_path / "empty.ids"
    empty.write_text("")
    out = run(capsys, "--sysfs-root", root, "--pci-ids", str(empty))  # a pci.ids that knows nothing
    for name in ("Ethernet controller", "3D controller", "NVMe controller", "PCI bridge"):
        assert name in out
    ids = tmp_path / "pci.ids"
    ids.write_text(
        "# test\n10de  NVIDIA Corporation\n\t2330  GH100 [H100 SXM5 80GB]\n15b3  Mellanox Technologies\n"
    )
    out = run(capsys, "--sysfs-root", root, "--pci-ids", str(ids))
    assert "NVIDIA Corporation GH100 [H100 SXM5 80GB]" in out
    assert main(["inspect", "--sysfs-root", root, "--pci-ids", str(tmp_path / "absent")]) == 2
    assert "--pci-ids" in capsys.readouterr().err


def _on_a_terminal(argv: list[str], env: dict[str, str]) -> str:
    """The command's output when its stdout is a real pseudo-terminal."""
    controller, terminal = pty.openpty()
    cmd = [sys.executable, "-m", "topodra.drivers.cli.main", *argv]
    proc = subprocess.Popen(cmd, stdout=terminal, stderr=subprocess.PIPE, cwd=REPO, env=env)
    os.close(terminal)
    chunks = []
    while True:
        try:
            data = os.read(controller, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(controller)
    return b"".join(chunks).decode()


def test_colour_on_a_terminal_not_in_a_pipe_nor_with_no_color(machines: object) -> None:
    root = str(machines("1s-4acc").root)  # type: ignore[operator]
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    argv = ["inspect", "--sysfs-root", root]
    assert "\033[" in _on_a_terminal(argv, {**env, "TERM": "xterm"})
    assert "\033[" not in _on_a_terminal(argv, {**env, "TERM": "xterm", "NO_COLOR": "1"})
    piped = subprocess.run(
        [sys.executable, "-m", "topodra.drivers.cli.main", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert piped.returncode == 0 and "\033[" not in piped.stdout
    forced = subprocess.run(
        [sys.executable, "-m", "topodra.drivers.cli.main", *argv, "--color", "always"],
        capture_output=True,
        text=True,
        env={**env, "NO_COLOR": "1"},
        cwd=REPO,
    )
    assert "\033[1;32mSW" in forced.stdout or "\033[" in forced.stdout


@pytest.mark.parametrize("name", ["1s-4acc", "2s-8acc-8nic", "2s-8acc-8nic-snc2", "64acc-300vf"])
def test_svg_is_valid_and_draws_every_group(
    machines: object, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tree: SynthTree = machines(name)  # type: ignore[operator]
    text = run(capsys, "--sysfs-root", str(tree.root), "-o", "svg")
    root = ET.fromstring(text)  # well-formed XML, or this raises
    assert root.tag == f"{SVG}svg" and root.get("version") == "1.1"
    width, height = float(root.get("width", 0)), float(root.get("height", 0))
    assert 0 < width <= 20000 and 0 < height <= 20000
    for rect in root.iter(f"{SVG}rect"):  # every box inside the canvas
        x, y = float(rect.get("x", 0)), float(rect.get("y", 0))
        assert (
            x + float(rect.get("width", 0)) <= width + 0.5
            and y + float(rect.get("height", 0)) <= height + 0.5
        )
    groups = {g.get("class") for g in root.iter(f"{SVG}g")}
    assert {"machine", "socket", "numa", "root", "accelerators"} <= groups
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    topo = discover(tree.root)
    view = build(topo)
    for item in view.items:
        assert f"{item.label}  {item.fn.address}" in texts
    for pkg in topo.packages:
        assert f"topology.topodra.io/socket={pkg.index}" in texts
    for node in topo.numa_nodes:
        assert f"resource.kubernetes.io/numaNode={node.id}" in texts
    for sw in {i.fn.pcie_switch for i in view.items if i.fn.pcie_switch}:
        assert f"topology.topodra.io/pcieSwitch={sw}" in texts
    # boxes nest: every device sits inside its switch's box
    by_class = [(g.get("class"), g) for g in root.iter(f"{SVG}g")]
    for cls, g in by_class:
        if cls == "switch":
            outer = g.find(f"{SVG}rect")
            assert outer is not None
            for inner in g.iter(f"{SVG}rect"):
                assert float(inner.get("x", 0)) >= float(outer.get("x", 0))
                assert float(inner.get("y", 0)) >= float(outer.get("y", 0))


def test_nested_switches_show_their_leaves_once_in_text_and_svg(
    machines: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """2s-8acc-8nic-pxb: each of the four switches is one block (one box) holding two leaf
    blocks (boxes), each with its GPU and its NIC; the PCI tree marks the leaves' upstream ports."""
    tree: SynthTree = machines("2s-8acc-8nic-pxb")  # type: ignore[operator]
    topo = discover(tree.root)
    out = run(capsys, "--sysfs-root", str(tree.root), "--color", "never")
    groups = out[out.index("What sits together") : out.index("\nLocality\n")]
    switches = re.findall(r"^        PCIe switch (\S+)  topology.topodra.io/pcieSwitch=\1$", groups, re.M)
    leaves = re.findall(r"^          leaf switch (\S+)  topology.topodra.io/pcieLeafSwitch=\1$", groups, re.M)
    assert len(switches) == len(set(switches)) == 4 and len(leaves) == len(set(leaves)) == 8
    for leaf in leaves:
        block = groups[groups.index(f"leaf switch {leaf}") :].splitlines()[1:3]
        fns = [topo.pci(line.split()[1]) for line in block]
        assert sorted(f.base_class for f in fns if f is not None) == [0x02, 0x03], block
        assert all(f is not None and f.pcie_leaf_switch == leaf for f in fns)
    tree_part = out[out.index("PCI devices by root complex") : out.index("What sits together")]
    assert sorted(re.findall(r"\[leaf switch (\S+)\]", tree_part)) == sorted(leaves)
    svg = ET.fromstring(run(capsys, "--sysfs-root", str(tree.root), "-o", "svg"))
    boxes = [g for g in svg.iter(f"{SVG}g") if g.get("class") in ("switch", "leaf")]
    assert [g.get("class") for g in boxes].count("switch") == 4
    for g in boxes:
        if g.get("class") == "switch":  # a switch box holds its two leaf boxes, nothing else
            assert [c.get("class") for c in g.findall(f"{SVG}g")] == ["leaf", "leaf"]
        else:
            assert sorted(c.get("class") or "" for c in g.findall(f"{SVG}g")) == ["accelerators", "nics"]


MIXED = {
    "version": 1,
    "name": "mixed",
    "description": "a top switch with a NIC of its own and a leaf switch of a GPU and a NIC",
    "cpu": {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1},
    "pci": {
        "roots": [
            {
                "numa_node": 0,
                "ports": [
                    {
                        "switch": {
                            "ports": [
                                {"switch": {"ports": [{"device": "h100-sxm"}, {"device": "cx7"}]}},
                                {"device": "cx7"},
                            ]
                        }
                    }
                ],
            }
        ]
    },
}


def test_a_switchs_own_devices_come_before_its_leaves(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """Printed after the leaf's devices, at their indent, the top switch's own NIC would read as
    the leaf's."""
    tree = synth_builder(tmp_path_factory, "inspect", {"mixed": MIXED})("mixed")
    out = run(capsys, "--sysfs-root", str(tree.root), "--color", "never")
    lines = out[out.index("What sits together") : out.index("\nLocality\n")].splitlines()
    at = next(i for i, line in enumerate(lines) if "PCIe switch" in line)
    assert [line.split()[0] for line in lines[at + 1 : at + 5]] == ["NIC1", "leaf", "ACC0", "NIC0"]


def test_png_is_the_svg_rasterized(machines: object, tmp_path: Path) -> None:
    import shutil

    from tests.conftest import skip_or_fail

    if shutil.which("rsvg-convert") is None:
        skip_or_fail("rsvg-convert is not installed (Debian: librsvg2-bin; .ci/run installs it)")
    root = str(machines("2s-8acc-8nic").root)  # type: ignore[operator]
    cmd = [sys.executable, "-m", "topodra.drivers.cli.main", "inspect", "--sysfs-root", root]
    svg = ET.fromstring(subprocess.run([*cmd, "-o", "svg"], capture_output=True, check=True, cwd=REPO).stdout)
    png = subprocess.run([*cmd, "-o", "png"], capture_output=True, check=True, cwd=REPO).stdout
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (int(svg.get("width", 0)), int(svg.get("height", 0)))
