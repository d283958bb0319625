"""PCI functions, root complexes, drivers, IOMMU groups and device nodes (DRM, accel) in sysfs."""

from __future__ import annotations

import hashlib

from topodra.common.synth.masks import cpulist, cpumask
from topodra.common.synth.pciconfig import config_space
from topodra.common.synth.plan import ACCEL_MAJOR, DRM_MAJOR, VFIO_DEV_MAJOR, Function, Plan
from topodra.common.synth.spec import LinkSpec
from topodra.common.synth.tree import Tree

LINK_SPEEDS = {1: "2.5", 2: "5.0", 3: "8.0", 4: "16.0", 5: "32.0", 6: "64.0"}
AER_CORRECTABLE = (
    "RxErr",
    "BadTLP",
    "BadDLLP",
    "Rollover",
    "Timeout",
    "NonFatalErr",
    "CorrIntErr",
    "HeaderOF",
)
AER_UNCORRECTABLE = (
    "Undefined",
    "DLP",
    "SDES",
    "TLP",
    "FCP",
    "CmpltTO",
    "CmpltAbrt",
    "UnxCmplt",
    "RxOF",
    "MalfTLP",
    "ECRC",
    "UnsupReq",
    "ACSViol",
    "UncorrIntErr",
    "BlockedTLP",
    "AtomicOpBlocked",
    "TLPBlockedErr",
    "PoisonTLPBlocked",
)


def link_speed(link: LinkSpec | None) -> str:
    return f"{LINK_SPEEDS[link.gen]} GT/s PCIe" if link is not None else "Unknown"


def aer_counters(names: tuple[str, ...], total: str) -> str:
    return "".join(f"{n} 0\n" for n in names) + f"{total} 0\n"


def render_pci(plan: Plan, tree: Tree) -> None:
    nbits = plan.nr_cpu_ids
    drivers: set[str] = set()
    for name, _node, cpus in plan.roots:
        d = f"sys/devices/{name}"
        bus = name.removeprefix("pci")
        tree.file(f"{d}/uevent", "")
        _pci_bus(tree, f"{d}/pci_bus/{bus}", d, cpus, nbits)
    by_bdf = {f.bdf: f for f in plan.functions}
    nvidia_minor = 0
    for f in plan.functions:
        _function(plan, tree, f, by_bdf, nbits)
        if f.driver:
            drivers.add(f.driver)
            tree.link(f"sys/bus/pci/drivers/{f.driver}/{f.bdf}", f.dir)
        if f.driver == "nvidia" and f.role != "vf":
            _nvidia_proc(tree, f, nvidia_minor, plan.spec.hostname)
            nvidia_minor += 1
    for drv in sorted(drivers):
        d = f"sys/bus/pci/drivers/{drv}"
        for name in ("bind", "unbind", "new_id", "remove_id", "uevent"):
            tree.file(f"{d}/{name}", b"")
    for group in sorted({f.iommu_group for f in plan.functions}):
        tree.file(f"sys/kernel/iommu_groups/{group}/type", "DMA-FQ")
        tree.file(
            f"sys/kernel/iommu_groups/{group}/reserved_regions", "0x00000000fee00000 0x00000000feefffff msi"
        )
    tree.file("sys/bus/pci/drivers_autoprobe", "1")
    tree.mkdir("sys/bus/pci/devices")
    tree.mkdir("sys/bus/pci/drivers")
    if any(f.drm_card is not None or f.drm_render is not None for f in plan.functions):
        tree.file("sys/class/drm/version", "drm 1.1.0 20060810")


def _pci_bus(tree: Tree, d: str, owner: str, cpus: tuple[int, ...], nbits: int) -> None:
    tree.file(f"{d}/cpuaffinity", cpumask(cpus, nbits))
    tree.file(f"{d}/cpulistaffinity", cpulist(cpus))
    tree.link(f"{d}/device", owner)
    tree.link(f"{d}/subsystem", "sys/class/pci_bus")
    tree.link(f"sys/class/pci_bus/{d.rsplit('/', 1)[1]}", d)


def _function(plan: Plan, tree: Tree, f: Function, by_bdf: dict[str, Function], nbits: int) -> None:
    d = f.dir
    cls = f.class_code
    tree.file(f"{d}/class", f"0x{cls:06x}")
    tree.file(f"{d}/vendor", f"0x{f.vendor:04x}")
    tree.file(f"{d}/device", f"0x{f.device:04x}")
    tree.file(f"{d}/subsystem_vendor", f"0x{f.subsystem_vendor:04x}")
    tree.file(f"{d}/subsystem_device", f"0x{f.subsystem_device:04x}")
    tree.file(f"{d}/revision", f"0x{f.revision:02x}")
    tree.file(f"{d}/config", config_space(f))
    tree.file(f"{d}/numa_node", str(f.numa_node if f.numa_node is not None else -1))
    tree.file(f"{d}/local_cpus", cpumask(f.local_cpus, nbits))
    tree.file(f"{d}/local_cpulist", cpulist(f.local_cpus))
    tree.file(f"{d}/irq", "0")
    tree.file(f"{d}/enable", "1")
    tree.file(f"{d}/msi_bus", "1")
    tree.file(f"{d}/broken_parity_status", "0")
    tree.file(f"{d}/d3cold_allowed", "1")
    tree.file(f"{d}/power_state", "D0")
    tree.file(f"{d}/driver_override", "(null)")
    tree.file(f"{d}/resource", "\n".join(["0x0000000000000000 0x0000000000000000 0x0000000000000000"] * 13))
    modalias = (
        f"pci:v{f.vendor:08X}d{f.device:08X}sv{f.subsystem_vendor:08X}sd{f.subsystem_device:08X}"
        f"bc{cls >> 16:02X}sc{(cls >> 8) & 0xFF:02X}i{cls & 0xFF:02X}"
    )
    tree.file(f"{d}/modalias", modalias)
    uevent = [f"DRIVER={f.driver}"] if f.driver else []
    uevent += [
        f"PCI_CLASS={cls:X}",
        f"PCI_ID={f.vendor:04X}:{f.device:04X}",
        f"PCI_SUBSYS_ID={f.subsystem_vendor:04X}:{f.subsystem_device:04X}",
        f"PCI_SLOT_NAME={f.bdf}",
        f"MODALIAS={modalias}",
    ]
    tree.file(f"{d}/uevent", "\n".join(uevent))
    tree.link(f"{d}/subsystem", "sys/bus/pci")
    tree.link(f"sys/bus/pci/devices/{f.bdf}", d)
    if f.driver:
        tree.link(f"{d}/driver", f"sys/bus/pci/drivers/{f.driver}")
    tree.link(f"{d}/iommu_group", f"sys/kernel/iommu_groups/{f.iommu_group}")
    tree.link(f"sys/kernel/iommu_groups/{f.iommu_group}/devices/{f.bdf}", d)
    if f.pcie_type is not None:
        tree.file(f"{d}/current_link_speed", link_speed(f.link))
        tree.file(f"{d}/current_link_width", str(f.link.width if f.link else 0))
        tree.file(f"{d}/max_link_speed", link_speed(f.max_link))
        tree.file(f"{d}/max_link_width", str(f.max_link.width if f.max_link else 0))
        tree.raw(f"{d}/aer_dev_correctable", aer_counters(AER_CORRECTABLE, "TOTAL_ERR_COR"))
        tree.raw(f"{d}/aer_dev_fatal", aer_counters(AER_UNCORRECTABLE, "TOTAL_ERR_FATAL"))
        tree.raw(f"{d}/aer_dev_nonfatal", aer_counters(AER_UNCORRECTABLE, "TOTAL_ERR_NONFATAL"))
    if f.is_bridge:
        assert f.secondary is not None and f.subordinate is not None
        tree.file(f"{d}/secondary_bus_number", str(f.secondary))
        tree.file(f"{d}/subordinate_bus_number", str(f.subordinate))
        _pci_bus(tree, f"{d}/pci_bus/{f.domain:04x}:{f.secondary:02x}", d, f.local_cpus, nbits)
    if f.sriov_total:
        tree.file(f"{d}/sriov_totalvfs", str(f.sriov_total))
        tree.file(f"{d}/sriov_numvfs", str(len(f.vfs)))
        tree.file(f"{d}/sriov_offset", str(f.sriov_offset))
        tree.file(f"{d}/sriov_stride", str(f.sriov_stride))
        tree.file(f"{d}/sriov_vf_device", f"{f.sriov_vf_device:04x}")
        tree.file(f"{d}/sriov_drivers_autoprobe", "1")
        for i, vf in enumerate(f.vfs):
            tree.link(f"{d}/virtfn{i}", by_bdf[vf].dir)
    if f.pf is not None:
        tree.link(f"{d}/physfn", by_bdf[f.pf].dir)
    p = f.profile
    if p is not None and f.role != "vf" and f.vendor_driver:
        if p.vram_bytes is not None:
            tree.file(f"{d}/mem_info_vram_total", str(p.vram_bytes))
            tree.file(f"{d}/mem_info_vram_used", "0")
        for rel, content in p.files:
            tree.file(f"{d}/{rel}", content)
    if f.drm_card is not None:
        _devnode(tree, f, "drm", f"card{f.drm_card}", DRM_MAJOR, f.drm_card, f"dri/card{f.drm_card}")
    if f.drm_render is not None:
        r = f.drm_render
        _devnode(tree, f, "drm", f"renderD{r}", DRM_MAJOR, r, f"dri/renderD{r}")
    if f.accel is not None:
        _devnode(tree, f, "accel", f"accel{f.accel}", ACCEL_MAJOR, f.accel, f"accel/accel{f.accel}")
    if f.vfio_dev is not None:
        n = f.vfio_dev
        _devnode(tree, f, "vfio-dev", f"vfio{n}", VFIO_DEV_MAJOR, n, f"vfio/devices/vfio{n}")


def _devnode(tree: Tree, f: Function, cls: str, name: str, major: int, minor: int, devname: str) -> None:
    d = f"{f.dir}/{cls}/{name}"
    tree.file(f"{d}/dev", f"{major}:{minor}")
    tree.file(
        f"{d}/uevent",
        f"MAJOR={major}\nMINOR={minor}\nDEVNAME={devname}" + ("\nDEVTYPE=drm_minor" if cls == "drm" else ""),
    )
    tree.link(f"{d}/device", f.dir)
    tree.link(f"{d}/subsystem", f"sys/class/{cls}")
    tree.link(f"sys/class/{cls}/{name}", d)


def _nvidia_proc(tree: Tree, f: Function, minor: int, hostname: str) -> None:
    h = hashlib.sha256(f"{hostname}\0{f.bdf}".encode()).hexdigest()
    uuid = f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
    model = f.profile.model if f.profile and f.profile.model else "NVIDIA GPU"
    tree.raw(
        f"proc/driver/nvidia/gpus/{f.bdf}/information",
        f"Model: \t\t {model}\nIRQ:   \t\t 0\nGPU UUID: \t {uuid}\nVideo BIOS: \t 96.00.99.00.01\n"
        f"Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t {f.bdf}\n"
        f"Device Minor: \t {minor}\nGPU Excluded:\t No\n",
    )
