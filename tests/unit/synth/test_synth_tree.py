"""The written tree itself: kernel formats, relative links that resolve, attributes that agree.

These checks read the files directly (no topodra reader), so they hold for any consumer that
walks sysfs the way the kernel documents it.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import stat
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from synth_cases import ALL, EDGE, Built, spec_of
from topodra.common.synth import MANIFEST, OutputError, build, make_plan, manifest, parse_spec
from topodra.common.synth.masks import cpulist, cpumask

BDF = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def read(path: Path) -> str:
    return path.read_text().rstrip("\n")


def parse_list(text: str) -> set[int]:
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def parse_mask(text: str) -> set[int]:
    value = int(text.replace(",", ""), 16)
    return {i for i in range(value.bit_length()) if value >> i & 1}


def test_kernel_mask_and_list_formats() -> None:
    # the exact strings a real 80-possible-CPU kernel printed (shared fixture R910, node0 cpumap)
    assert cpumask([0, 4, 8, 12, 16, 20, 24, 28, 32, 36], 80) == "0000,00000011,11111111"
    assert cpumask(range(40), 40) == "ff,ffffffff"
    assert cpumask([0, 1], 2) == "3"
    assert cpumask([], 256) == ",".join(["00000000"] * 8)
    assert cpulist([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert cpulist([]) == ""


def all_links(root: Path) -> list[Path]:
    out = []
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(folder, name)
            if p.is_symlink():
                out.append(p)
    return out


@pytest.mark.parametrize("name", ALL)
def test_every_link_is_relative_and_resolves_inside(name: str, synth_tree: Callable[[str], Built]) -> None:
    built = synth_tree(name)
    root = built.root.resolve()
    links = all_links(root)
    assert links
    for link in links:
        target = os.readlink(link)
        assert not target.startswith("/"), link
        resolved = link.resolve()
        assert resolved.exists(), f"dangling {link} -> {target}"
        assert resolved.is_relative_to(root), link


@pytest.mark.parametrize("name", ALL)
def test_bus_links_and_pcie_roots(name: str, synth_tree: Callable[[str], Built]) -> None:
    built = synth_tree(name)
    devices = built.root / "sys/bus/pci/devices"
    found = set()
    for folder, dirs, _files in os.walk(built.root / "sys/devices"):
        for d in dirs:
            if BDF.match(d) and not Path(folder, d).is_symlink():
                found.add(d)
    assert {p.name for p in devices.iterdir()} == found == {f.bdf for f in built.plan.functions}
    for f in built.plan.functions:
        target = os.readlink(devices / f.bdf)
        # the kernel's relative form, and the upstream pcieRoot rule applied to it
        assert target.startswith("../../../devices/pci"), target
        parts = os.path.normpath(os.path.join("sys/bus/pci/devices", target)).split("/")
        assert parts[:2] == ["sys", "devices"] and parts[-1] == f.bdf
        assert parts[2] == f.root


def config_of(d: Path) -> bytes:
    return (d / "config").read_bytes()


@pytest.mark.parametrize("name", ALL)
def test_config_space_agrees_with_attributes(name: str, synth_tree: Callable[[str], Built]) -> None:
    built = synth_tree(name)
    for f in built.plan.functions:
        d = built.root / f.dir
        cfg = config_of(d)
        assert len(cfg) == 256
        vendor, device = struct.unpack_from("<HH", cfg, 0)
        if f.role == "vf":
            assert (vendor, device) == (0xFFFF, 0xFFFF)  # a VF's id registers read as all ones
        else:
            assert (f"0x{vendor:04x}", f"0x{device:04x}") == (read(d / "vendor"), read(d / "device"))
        class_code = cfg[0x0B] << 16 | cfg[0x0A] << 8 | cfg[0x09]
        assert f"0x{class_code:06x}" == read(d / "class")
        assert f"0x{cfg[0x08]:02x}" == read(d / "revision")
        is_bridge = cfg[0x0E] & 0x7F == 1
        assert is_bridge == (class_code >> 8 == 0x0604)
        if is_bridge:
            assert cfg[0x18] == f.bus
            assert (cfg[0x19], cfg[0x1A]) == (
                int(read(d / "secondary_bus_number")),
                int(read(d / "subordinate_bus_number")),
            )
            # every function below lies in the bridge's bus range
            for g in built.plan.functions:
                if f.bdf in g.bridges:
                    assert cfg[0x19] <= g.bus <= cfg[0x1A], (f.bdf, g.bdf)
        else:
            subsystem = struct.unpack_from("<HH", cfg, 0x2C)
            assert (f"0x{subsystem[0]:04x}", f"0x{subsystem[1]:04x}") == (
                read(d / "subsystem_vendor"),
                read(d / "subsystem_device"),
            )
        if (d / "current_link_speed").exists():
            assert cfg[0x06] & 0x10 and cfg[0x34] == 0x40 and cfg[0x40] == 0x10  # PCIe capability
            status = struct.unpack_from("<H", cfg, 0x40 + 0x12)[0]
            speeds = {
                0: "Unknown",
                1: "2.5 GT/s PCIe",
                2: "5.0 GT/s PCIe",
                3: "8.0 GT/s PCIe",
                4: "16.0 GT/s PCIe",
                5: "32.0 GT/s PCIe",
            }
            assert speeds[status & 0xF] == read(d / "current_link_speed")
            assert (status >> 4) & 0x3F == int(read(d / "current_link_width"))
        else:
            assert not cfg[0x06] & 0x10


@pytest.mark.parametrize("name", ALL)
def test_cpu_topology_masks_agree(name: str, synth_tree: Callable[[str], Built]) -> None:
    built = synth_tree(name)
    cpu_dir = built.root / "sys/devices/system/cpu"
    online = parse_list(read(cpu_dir / "online"))
    present = parse_list(read(cpu_dir / "present"))
    assert online <= present <= parse_list(read(cpu_dir / "possible"))
    assert parse_list(read(cpu_dir / "offline")) == parse_list(read(cpu_dir / "possible")) - online
    assert {int(p.name[3:]) for p in cpu_dir.glob("cpu[0-9]*")} == present
    node_of = {}
    for node in (built.root / "sys/devices/system/node").glob("node[0-9]*"):
        cpus = parse_list(read(node / "cpulist"))
        assert parse_mask(read(node / "cpumap")) == cpus
        for c in cpus:
            assert c not in node_of
            node_of[c] = int(node.name[4:])
    assert set(node_of) == online  # the node lists partition the online CPUs
    package_of: dict[str, set[int]] = {}
    for c in sorted(present):
        d = cpu_dir / f"cpu{c}"
        links = [p.name for p in d.glob("node[0-9]*")]
        assert len(links) == 1
        if c not in online:
            assert read(d / "online") == "0" and not (d / "topology").exists() and not (d / "cache").exists()
            continue
        assert (d / "online").exists() == (c != 0 or built.spec.cpu.cpu0_hotpluggable)
        assert links == [f"node{node_of[c]}"]
        t = d / "topology"
        core = parse_list(read(t / "core_cpus_list"))
        assert c in core and core == parse_list(read(t / "thread_siblings_list")) == parse_mask(
            read(t / "core_cpus")
        )
        package = parse_list(read(t / "package_cpus_list"))
        assert (
            core
            <= parse_list(read(t / "die_cpus_list"))
            <= package
            == parse_list(read(t / "core_siblings_list"))
        )
        assert core <= parse_list(read(t / "cluster_cpus_list"))
        package_of.setdefault(read(t / "physical_package_id"), set()).add(c)
        for index in sorted((d / "cache").glob("index*")):
            shared = parse_list(read(index / "shared_cpu_list"))
            assert shared == parse_mask(read(index / "shared_cpu_map"))
            assert core <= shared <= online
            size = int(read(index / "size").removesuffix("K")) * 1024
            assert size == 64 * int(read(index / "ways_of_associativity")) * int(
                read(index / "number_of_sets")
            )
    # CPUs with the same physical_package_id are exactly one package_cpus set
    for cpus in package_of.values():
        assert parse_list(read(cpu_dir / f"cpu{min(cpus)}/topology/package_cpus_list")) == cpus


@pytest.mark.parametrize("name", ALL)
def test_sriov_net_rdma_and_device_nodes(name: str, synth_tree: Callable[[str], Built]) -> None:
    built = synth_tree(name)
    root = built.root
    for f in built.plan.functions:
        d = root / f.dir
        if (d / "sriov_totalvfs").exists():
            num = int(read(d / "sriov_numvfs"))
            assert num <= int(read(d / "sriov_totalvfs"))
            vfs = sorted(d.glob("virtfn*"), key=lambda p: int(p.name[6:]))
            assert len(vfs) == num
            for vf in vfs:
                assert (vf / "physfn").resolve() == d.resolve()
                assert read(vf / "vendor") == read(d / "vendor")
                assert read(vf / "device") == "0x" + read(d / "sriov_vf_device")
        assert (d / "iommu_group").resolve() == (root / f"sys/kernel/iommu_groups/{f.iommu_group}").resolve()
        assert (root / f"sys/kernel/iommu_groups/{f.iommu_group}/devices/{f.bdf}").resolve() == d.resolve()
        if f.driver:
            assert (d / "driver").resolve().name == f.driver
            assert (root / f"sys/bus/pci/drivers/{f.driver}/{f.bdf}").resolve() == d.resolve()
        assert parse_list(read(d / "local_cpulist")) == parse_mask(read(d / "local_cpus"))
    ifindexes = set()
    for link in (root / "sys/class/net").iterdir():
        n = link.resolve()
        assert n.name == link.name
        ifindex = int(read(n / "ifindex"))
        assert ifindex not in ifindexes
        ifindexes.add(ifindex)
        if (n / "device").exists():
            assert read(n / "device" / "class").startswith("0x02")
            assert BDF.match(n.parent.parent.name)
        else:
            assert n.parent.parent.name == "virtual"
    for cls, major in (("drm", 226), ("accel", 261)):
        for link in (root / f"sys/class/{cls}").glob("*[0-9]"):
            node = link.resolve()
            assert read(node / "dev").startswith(f"{major}:")
            assert BDF.match((node / "device").resolve().name)
    for link in (root / "sys/class/infiniband").glob("*"):
        ib = link.resolve()
        pci_dir = (ib / "device").resolve()
        assert BDF.match(pci_dir.name)
        verbs = list((pci_dir / "infiniband_verbs").iterdir())
        assert [read(v / "ibdev") for v in verbs] == [link.name]
        assert read(verbs[0] / "dev").startswith("231:")


@pytest.mark.parametrize("name", ALL)
def test_default_route_names_the_uplink(name: str, synth_tree: Callable[[str], Built]) -> None:
    built = synth_tree(name)
    lines = (built.root / "proc/net/route").read_text().splitlines()
    assert lines[0].split() == [
        "Iface",
        "Destination",
        "Gateway",
        "Flags",
        "RefCnt",
        "Use",
        "Metric",
        "Mask",
        "MTU",
        "Window",
        "IRTT",
    ]
    defaults = [line.split() for line in lines[1:] if line.split()[1] == "00000000"]
    uplink = built.plan.uplink
    if uplink is None:
        assert defaults == []
        return
    assert [row[0] for row in defaults] == [uplink.name]
    gateway = ipaddress.IPv4Address(int(defaults[0][2], 16).to_bytes(4, "little"))
    assert gateway == built.spec.network.gateway_ipv4
    assert (built.root / "sys/class/net" / uplink.name / "device").exists()
    v6 = [line.split() for line in (built.root / "proc/net/ipv6_route").read_text().splitlines()]
    assert any(row[0] == "0" * 32 and row[1] == "00" and row[-1] == uplink.name for row in v6)


@pytest.mark.parametrize("name", ALL)
def test_manifest_is_the_plan(name: str, synth_tree: Callable[[str], Built]) -> None:
    built = synth_tree(name)
    assert json.loads((built.root / MANIFEST).read_text()) == json.loads(json.dumps(manifest(built.plan)))


def snapshot(root: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(folder, name)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = p.read_bytes()
    return out


def test_same_spec_same_bytes(synth_base: Path) -> None:
    """Two processes with different hash seeds write byte-identical trees (set order never leaks)."""
    for seed, out in (("1", "det-a"), ("2", "det-b")):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "topodra.drivers.cli.main",
                "synth",
                "--spec",
                "-",
                "--dest",
                str(synth_base / out),
            ],
            input=json.dumps(EDGE),
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
    assert snapshot(synth_base / "det-a") == snapshot(synth_base / "det-b")


def test_hostname_changes_identities_only() -> None:
    spec = spec_of("2s-snc2")
    a = make_plan(spec)
    b = make_plan(parse_spec({**spec.source, "hostname": "node-2"}))
    assert [f.bdf for f in a.functions] == [f.bdf for f in b.functions]
    assert [n.name for n in a.netdevs] == [n.name for n in b.netdevs]
    macs_a = {n.address for n in a.netdevs if n.function}
    macs_b = {n.address for n in b.netdevs if n.function}
    assert macs_a.isdisjoint(macs_b)


def test_output_folder_rules(tmp_path: Path) -> None:
    spec = parse_spec({"name": "tiny", "cpu": {"cores_per_socket": 1}})
    out = tmp_path / "out"
    build(spec, out)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="already holds sys, proc"):
        build(spec, out)
    (out / "sys/devices/system/cpu/cpu0/extra").write_text("stale")
    build(spec, out, force=True)
    assert (out / "notes.txt").read_text() == "mine"  # only what a build writes is replaced
    assert not (out / "sys/devices/system/cpu/cpu0/extra").exists()
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError, match="is not a folder"):
        build(spec, tmp_path / "file")
    with pytest.raises(OutputError, match="refusing"):
        build(spec, Path("/"), force=True)


def test_vfio_bound_function_has_no_vendor_interfaces(synth_tree: Callable[[str], Built]) -> None:
    built = synth_tree("edge")
    gpus = [f for f in built.plan.functions if f.device == 0x2330]
    assert [f.driver for f in gpus] == ["nvidia", "vfio-pci"]
    vfio = built.root / gpus[1].dir
    assert (vfio / "driver").resolve().name == "vfio-pci"
    assert not (vfio / "drm").exists()
    nodes = list((vfio / "vfio-dev").iterdir())
    assert [n.name for n in nodes] == ["vfio0"]
    assert read(nodes[0] / "dev") == "511:0"
    assert (built.root / "sys/class/vfio-dev/vfio0").resolve() == nodes[0].resolve()
    assert not (built.root / f"proc/driver/nvidia/gpus/{gpus[1].bdf}").exists()
    assert (built.root / f"proc/driver/nvidia/gpus/{gpus[0].bdf}/information").exists()


def test_dev_nodes_are_harmless_stand_ins(synth_base: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("creating character devices needs root")
    out = synth_base / "devnodes"
    result = build(spec_of("edge"), out, dev_nodes=True)
    declared = json.loads((out / MANIFEST).read_text())["device_nodes"]
    paths = {n["path"] for n in declared}
    assert {"/dev/dri/renderD128", "/dev/vfio/vfio", "/dev/nvidiactl", "/dev/infiniband/rdma_cm"} <= paths
    created = set()
    for folder, _dirs, files in os.walk(out / "dev"):
        for name in files:
            p = Path(folder, name)
            st = p.lstat()
            assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3), p
            assert stat.S_IMODE(st.st_mode) == 0o666
            created.add("/" + str(p.relative_to(out)))
    assert created == paths
    # the real numbers are the ones sysfs shows for the same node
    for n in declared:
        # shared nodes and VFIO group nodes have no sysfs `dev` file to compare with
        if n["pci"] is None or ("/vfio/" in n["path"] and "devices" not in n["path"]):
            continue
        f = result.plan.function(n["pci"])
        name = n["path"].rsplit("/", 1)[1]
        if name.startswith("nvidia"):
            continue
        sysfs = next(p for p in (out / f.dir).glob(f"*/{name}") if (p / "dev").exists())
        assert read(sysfs / "dev") == n["dev"], n
    # --force replaces dev/ along with the rest
    build(spec_of("minimal"), out, force=True)
    assert not (out / "dev").exists()
