"""What the accelerator devices need beyond `discover()`: a few vendor files, read at the edge.

Device memory (amdgpu `mem_info_vram_total`, xe `tile<N>/physical_vram_size_bytes`, NEC
`ve/veN/memory_size`), NVIDIA's device minors (`proc/driver/nvidia/gpus/<BDF>/information`),
character-device majors from `proc/devices`, the VFIO container node from
`sys/class/misc/vfio/dev`, product names from pci.ids, and device nodes discovery does not look
for: vendor classes (NEC's `ve/veN`) and DRM/accel nodes of functions outside the accelerator
classes (an FPGA an operator named). Everything is relative to the discovery root, so a captured
or synthetic tree answers the same way as the machine. Unreadable or odd files give None, never
an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from topodra.common.topology import pciids
from topodra.common.topology.hostfiles import char_majors, dev_numbers, devname, names, read_count, read_text
from topodra.common.topology.model import DeviceNode, PciFunction

# Class folders under a PCI function that hold its device nodes: (folder, node names, node kind).
# discovery reads drm and accel for accelerator classes; the rest are vendor classes it does not.
DISCOVERED_CLASSES = (
    ("drm", re.compile(r"(card|renderD)\d+\Z"), "drm"),
    ("accel", re.compile(r"accel\d+\Z"), "accel"),
)
VENDOR_CLASSES = (
    ("ve", re.compile(r"ve\d+\Z"), "ve"),  # NEC Vector Engine (ve_drv): /dev/veN
)
_TILE = re.compile(r"tile\d+\Z")


@dataclass(frozen=True, slots=True)
class HostInfo:
    """Per-function extras, keyed by PCI address, and a few machine-wide facts."""

    memory_bytes: Mapping[str, int] = field(default_factory=dict)
    nvidia_minors: Mapping[str, int] = field(default_factory=dict)
    product_names: Mapping[str, str] = field(default_factory=dict)
    extra_nodes: Mapping[str, tuple[DeviceNode, ...]] = field(default_factory=dict)
    char_majors: Mapping[str, int] = field(default_factory=dict)  # proc/devices name -> major
    vfio_container: tuple[int, int] | None = None  # numbers of /dev/vfio/vfio


def device_memory(fn_dir: Path) -> int | None:
    """Bytes of device memory where the kernel driver exposes it, else None."""
    vram = read_count(fn_dir / "mem_info_vram_total")  # amdgpu, in bytes
    if vram:
        return vram
    ve = [n for n in names(fn_dir / "ve") if n.startswith("ve")]
    if ve:  # NEC ve_drv: memory_size in GiB (48 on a Type 10B, which has 48 GB of HBM2)
        gib = read_count(fn_dir / "ve" / ve[0] / "memory_size")
        if gib:
            return gib << 30
    total = 0
    for tile in [n for n in names(fn_dir) if _TILE.match(n)]:  # xe: one VRAM region per tile
        size = read_count(fn_dir / tile / "physical_vram_size_bytes")
        if size:
            total += size
    return total or None


def nvidia_information(root: Path, address: str) -> dict[str, str]:
    """`Key: value` lines of the NVIDIA driver's per-GPU information file."""
    text = read_text(root / "proc/driver/nvidia/gpus" / address / "information")
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def scan_nodes(
    fn_dir: Path, address: str, classes: tuple[tuple[str, re.Pattern[str], str], ...]
) -> tuple[DeviceNode, ...]:
    """Nodes of a function in the given class folders (kind drm-render/drm-card, accel, ve)."""
    nodes = []
    for sub, pattern, kind in classes:
        for name in [n for n in names(fn_dir / sub) if pattern.match(n)]:
            class_dir = fn_dir / sub / name
            numbers = dev_numbers(class_dir / "dev")
            major, minor = numbers if numbers else (None, None)
            kind_here = kind
            if kind == "drm":
                kind_here = "drm-render" if name.startswith("render") else "drm-card"
            nodes.append(DeviceNode(kind_here, name, devname(class_dir, name), major, minor, address))
    return tuple(nodes)


def probe(root: Path, functions: Iterable[PciFunction], pci_ids: tuple[str, ...]) -> HostInfo:
    memory: dict[str, int] = {}
    minors: dict[str, int] = {}
    products: dict[str, str] = {}
    extra: dict[str, tuple[DeviceNode, ...]] = {}
    for fn in functions:
        fn_dir = root / fn.sysfs_path
        size = device_memory(fn_dir)
        if size is not None:
            memory[fn.address] = size
        if fn.driver == "nvidia":
            minor = nvidia_information(root, fn.address).get("Device Minor", "")
            if minor.isdigit():
                minors[fn.address] = int(minor)
        if fn.vendor is not None and fn.device is not None:
            name = pciids.lookup(fn.vendor, fn.device, pci_ids)
            if name:
                products[fn.address] = name
        classes = VENDOR_CLASSES if fn.in_accelerator_class else DISCOVERED_CLASSES + VENDOR_CLASSES
        found = scan_nodes(fn_dir, fn.address, classes)
        if found:
            extra[fn.address] = found
    return HostInfo(
        memory_bytes=memory,
        nvidia_minors=minors,
        product_names=products,
        extra_nodes=extra,
        char_majors=char_majors(root),
        vfio_container=dev_numbers(root / "sys/class/misc/vfio/dev"),
    )
