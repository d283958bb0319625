"""What the accelerator devices of a machine must be, from descriptions the driver never reads.

Captured trees come with `*.expected.json` (an independent reader checked against hwloc),
synthetic trees with `synth-manifest.json` (the declared machine). Values neither carries
(kernel driver, IOMMU group, link files, device memory, node numbers) are read here straight
from the raw sysfs files with plain `os` calls, the way the kernel documents them, so the
driver is not only compared with its own topology library.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import kubernetes_validate
from topodra.common.device import Device, Taint
from topodra.common.publisher.build import build_desired
from topodra.drivers.accelerator.devices import DRIVER, MEMORY, Accelerator

STD = "resource.kubernetes.io"
TOPO = "topology.topodra.io"
UPSTREAM_BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]\Z")
ANY_BDF = re.compile(r"[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
SCHEMAS = ("1.34.0", "1.37.0")
NODE = "node-a"
# The list, written down again here: display adapters that are consoles, BMCs or
# emulated, which must never be published whatever nodes they have.
CONSOLE_VENDORS = frozenset({0x1A03, 0x102B, 0x1013, 0x1AF4, 0x1B36, 0x1234, 0x15AD, 0x1414})
GENERATION = {"2.5": 1, "5": 2, "5.0": 2, "8": 3, "8.0": 3, "16.0": 4, "32.0": 5, "64.0": 6}


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def raw(root: Path, bdf: str, name: str) -> str | None:
    try:
        return (root / "sys/bus/pci/devices" / bdf / name).read_bytes().decode().rstrip("\x00 \n")
    except OSError:
        return None


def raw_link(root: Path, bdf: str, name: str) -> str | None:
    try:
        return os.path.basename(os.readlink(root / "sys/bus/pci/devices" / bdf / name).rstrip("/"))
    except OSError:
        return None


def upstream_pcie_root(root: Path, bdf: str) -> str | None:
    """pcieRoot as docs/design/resourceslices.md defines it, written again: readlink the bus
    entry, first component under devices/."""
    try:
        target = os.readlink(root / "sys/bus/pci/devices" / bdf)
    except OSError:
        return None
    path = os.path.normpath(os.path.join("sys/bus/pci/devices", target)).lstrip("/")
    parts = path.split("/")
    if len(parts) < 3 or parts[:2] != ["sys", "devices"] or not parts[2].startswith("pci"):
        return None
    return parts[2]


def parent_bridge(root: Path, bdf: str) -> str | None:
    """The function's upstream port: the folder holding it, when that is a PCI function."""
    real = Path(os.path.realpath(root / "sys/bus/pci/devices" / bdf))
    return real.parent.name if ANY_BDF.match(real.parent.name) else None


def gts(text: str | None) -> float | None:
    m = re.match(r"\s*([0-9.]+)\s*GT/s", text or "")
    return float(m.group(1)) if m else None


def expected_link_speed(root: Path, bdf: str) -> str | None:
    """PCIe trains to the fastest speed both ends support: the lower maximum of the two."""
    own = raw(root, bdf, "max_link_speed")
    if gts(own) is None:
        return None
    port = parent_bridge(root, bdf)
    theirs = raw(root, port, "max_link_speed") if port else None
    if theirs is not None and gts(theirs) is not None and gts(theirs) < gts(own):  # type: ignore[operator]
        return theirs
    return own


def expected_memory(root: Path, bdf: str) -> int | None:
    vram = raw(root, bdf, "mem_info_vram_total")
    if vram and vram.isdigit() and int(vram) > 0:
        return int(vram)
    base = root / "sys/bus/pci/devices" / bdf
    tiles = sorted(base.glob("tile[0-9]*/physical_vram_size_bytes"))
    total = sum(int(p.read_text().strip()) for p in tiles if p.read_text().strip().isdigit())
    if total:
        return total
    ve = sorted(base.glob("ve/ve[0-9]*/memory_size"))
    if ve and ve[0].read_text().strip().isdigit():
        return int(ve[0].read_text().strip()) * 2**30
    return None


def class_nodes(root: Path, bdf: str) -> list[str]:
    """/dev paths of the function's DRM render/card, accel and VE nodes, from uevent DEVNAME."""
    base = root / "sys/bus/pci/devices" / bdf
    out: dict[str, list[str]] = {"render": [], "card": [], "accel": [], "ve": []}
    for sub, pattern in (("drm", r"(renderD|card)\d+"), ("accel", r"accel\d+"), ("ve", r"ve\d+")):
        for d in sorted((base / sub).glob("*")):
            if not re.fullmatch(pattern, d.name):
                continue
            devname = next(
                (
                    line.split("=", 1)[1]
                    for line in (d / "uevent").read_text().splitlines()
                    if line.startswith("DEVNAME=")
                ),
                d.name,
            )
            key = "render" if d.name.startswith("renderD") else ("card" if sub == "drm" else sub)
            out[key].append("/dev/" + devname)
    return out["render"] + out["card"] + out["accel"] + out["ve"]


def has_compute_interface(root: Path, bdf: str) -> bool:
    base = root / "sys/bus/pci/devices" / bdf
    if any(re.fullmatch(r"renderD\d+", p.name) for p in (base / "drm").glob("*")):
        return True
    if any(re.fullmatch(r"accel\d+", p.name) for p in (base / "accel").glob("*")):
        return True
    return raw_link(root, bdf, "driver") in ("vfio-pci", "nvidia")


def socket_index(packages: Sequence[Mapping[str, Any]], cpus: Iterable[int]) -> int | None:
    """Index over packages ordered by lowest CPU of the one package holding all of `cpus`."""
    ordered = sorted((p for p in packages if p["cpus"]), key=lambda p: min(p["cpus"]))
    wanted = set(cpus)
    if not wanted:
        return None
    holders = [i for i, p in enumerate(ordered) if wanted <= set(p["cpus"])]
    return holders[0] if len(holders) == 1 else None


def check_pci_truth(root: Path, acc: Accelerator, p: Mapping[str, Any], socket: int | None) -> None:
    """One device against a fixture/manifest `pci` entry and the raw files."""
    a = acc.device.attributes
    bdf = p["bdf"]
    where = f"{acc.name} ({bdf})"
    assert acc.address == bdf and a[f"{DRIVER}/pciAddress"] == bdf, where
    assert acc.name == "pci-" + bdf.replace(":", "-").replace(".", "-"), where
    assert a.get(f"{STD}/pciBusID") == (bdf if UPSTREAM_BDF.match(bdf) else None), where
    want_root = upstream_pcie_root(root, bdf)
    if want_root is not None:
        assert a[f"{STD}/pcieRoot"] == want_root, where
        if want_root == p["root"]:
            assert a[f"{STD}/pcieRoot"] == p["root"], where
    else:
        assert a.get(f"{STD}/pcieRoot") in (None, p["root"]), where
    assert a.get(f"{STD}/numaNode") == p["numa"], where  # null (-1) means absent, never -1
    assert a.get(f"{STD}/numaNode") != -1, where
    switch = p["bridges"][1] if len(p["bridges"]) >= 3 else None
    assert a.get(f"{TOPO}/pcieSwitch") == switch, where
    assert a.get(f"{TOPO}/pcieLeafSwitch") == leaf_switch(p), where
    assert a.get(f"{TOPO}/socket") == socket, where
    assert a[f"{DRIVER}/vendorId"] == f"0x{p['vendor']}", where
    assert a[f"{DRIVER}/deviceId"] == f"0x{p['device']}", where
    assert str(a[f"{DRIVER}/pciClass"]).startswith(f"0x{p['class']}"), where
    assert a.get(f"{DRIVER}/kernelDriver") == raw_link(root, bdf, "driver"), where
    group = raw_link(root, bdf, "iommu_group")
    assert a.get(f"{DRIVER}/iommuGroup") == (int(group) if group else None), where
    speed = expected_link_speed(root, bdf)
    assert a.get(f"{DRIVER}/pcieLinkSpeed") == speed, where
    if speed is not None:
        number = speed.split()[0]
        assert a.get(f"{DRIVER}/pcieLinkGeneration") == GENERATION.get(number), where
    width = raw(root, bdf, "current_link_width")
    if width and width.isdigit() and 0 < int(width) <= 32:
        assert a[f"{DRIVER}/pcieLinkWidth"] == int(width), where
    else:
        assert f"{DRIVER}/pcieLinkWidth" not in a, where
    memory = expected_memory(root, bdf)
    if memory is None:
        assert MEMORY not in acc.device.capacity, where
    else:
        assert acc.device.capacity[MEMORY].value == str(memory), where
    physfn = raw_link(root, bdf, "physfn")
    assert a[f"{DRIVER}/sriovVirtualFunction"] is (physfn is not None), where
    if physfn is not None:
        assert a[f"{DRIVER}/sriovRole"] == "vf" and a[f"{DRIVER}/sriovPhysicalFunction"] == physfn, where
    # the device nodes prepare will hand out are the function's own, as the kernel names them
    own = [n.path for n in acc.nodes]
    assert own[: len(class_nodes(root, bdf))] == class_nodes(root, bdf), where


def check_limits(devices: Sequence[Device]) -> None:
    for d in devices:
        assert len(d.attributes) + len(d.capacity) <= 32, d.name
        for v in d.attributes.values():
            if isinstance(v, str):
                assert 0 < len(v.encode()) <= 64, (d.name, v)


def assert_valid(devices: Sequence[Device]) -> None:
    """Publisher validation drops nothing; the API schema (strict) accepts every slice, also
    with every device tainted (the 64-device limit then applies)."""
    check_limits(devices)
    tainted = [
        Device(d.name, d.attributes, d.capacity, (Taint(f"{DRIVER}/unhealthy", "DeviceRemoved"),))
        for d in devices
    ]
    for devs in (list(devices), tainted):
        desired = build_desired(DRIVER, NODE, None, devs)
        assert desired.problems == (), [str(p) for p in desired.problems]
        assert len(desired.devices) == len(devs)
        for obj in desired.slices:
            body = json.loads(json.dumps(obj))
            body["metadata"]["name"] = body["metadata"]["generateName"] + "abcde"
            for version in SCHEMAS:
                kubernetes_validate.validate(body, version, strict=True)


def leaf_switch(p: dict[str, Any]) -> str | None:
    """A synthetic manifest's leaf switch (from the roles its plan gave the bridges); for a
    captured machine's expected.json, which has no roles, the next-to-last bridge."""
    if "pcie_leaf_switch" in p:
        leaf: str | None = p["pcie_leaf_switch"]
        return leaf
    bridges = p["bridges"]
    return str(bridges[-2]) if len(bridges) >= 3 else None
