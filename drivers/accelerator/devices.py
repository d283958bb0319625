"""Accelerator devices as published: a pure function of the topology, the host extras and options.

One device per selected PCI function (selection.py), SR-IOV VFs as devices of their own that
name their PF. Names come from the PCI address (`pci-0000-3b-00-0`), which survives reboots and
driver rebinds; DRM and accel minors do not, so they are never part of a name or attribute.

Attributes, in order of importance (the API allows 32 attributes + capacities per device; the
list below is 27 at most, and `_within_limits` would drop from the end if it ever grew):
- locality (common/pciattrs.py, shared with the NIC driver): pciBusID, pcieRoot, numaNode,
  pcieSwitch, pcieLeafSwitch, socket;
- `accelerator.topodra.io/`: pciAddress, type (gpu | accelerator | coprocessor | other),
  vendorId, deviceId, pciClass, kernelDriver, productName (pci.ids, cut to 64 bytes),
  subsystemVendorId, subsystemDeviceId, pcieLinkSpeed + pcieLinkGeneration (the speed the link
  trains to under load: the lower of the function's and its upstream port's maximum; GPUs drop
  the negotiated speed when idle, which would rewrite the slice every few seconds),
  pcieLinkWidth (negotiated), iommuGroup, sriovVirtualFunction, sriovRole (pf | vf),
  sriovPhysicalFunction, sriovVfIndex, sriovTotalVfs, sriovNumVfs;
- capacity `accelerator.topodra.io/memory` (bytes) where the kernel driver tells it.

Each device also carries what prepare needs: its device nodes (with the numbers sysfs gives,
which prepare checks against the host's nodes) and a `problem` when it cannot be handed out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from topodra.common import pciattrs
from topodra.common.cdi.hostnodes import Node
from topodra.common.device import AttributeValue, Capacity, Device
from topodra.common.topology.model import PciFunction, Topology
from topodra.drivers.accelerator import selection
from topodra.drivers.accelerator.options import AcceleratorOptions
from topodra.drivers.accelerator.probe import HostInfo

DRIVER = "accelerator.topodra.io"
MEMORY = f"{DRIVER}/memory"
MAX_KEYS = 32
MAX_STRING = pciattrs.MAX_STRING
NVIDIA_MAJOR = 195  # LANANA-registered; proc/devices says so when the driver is loaded
NVIDIA_CTL_MINOR = 255
_GTS = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s")
_GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One published accelerator and what prepare and health need that is not an attribute."""

    device: Device
    address: str
    driver: str | None
    nodes: tuple[Node, ...]  # the function's own nodes
    shared_nodes: tuple[Node, ...] = ()  # once per claim: nvidiactl, nvidia-uvm, /dev/vfio/vfio
    problem: str | None = None  # why prepare must refuse it, e.g. an NVIDIA minor nobody tells
    aer_fatal: int | None = None  # TOTAL_ERR_FATAL at discovery
    reason: str = ""  # why it was selected

    @property
    def name(self) -> str:
        name: str = self.device.name
        return name


def gts(speed: str | None) -> float | None:
    m = _GTS.match(speed or "")
    return float(m.group(1)) if m else None


def generation(speed: str | None) -> int | None:
    value = gts(speed)
    return None if value is None else _GENERATIONS.get(value)


def link_speed(topo: Topology, fn: PciFunction) -> str | None:
    """The lower of the function's and its upstream port's maximum link speed."""
    own: str | None = fn.link.max_speed if fn.link is not None else None
    if own is None or gts(own) is None:
        return None
    if fn.bridges:
        port = topo.pci(fn.bridges[-1])
        theirs: str | None = port.link.max_speed if port is not None and port.link is not None else None
        their_gts, own_gts = gts(theirs), gts(own)
        if theirs is not None and their_gts is not None and own_gts is not None and their_gts < own_gts:
            return theirs
    return own


def cut(text: str, limit: int = MAX_STRING) -> str:
    """At most `limit` bytes, cut at a character boundary."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore").rstrip()


def attributes(
    topo: Topology, fn: PciFunction, host: HostInfo, *, lists: bool = False
) -> dict[str, AttributeValue]:
    d = DRIVER
    attrs: dict[str, AttributeValue] = pciattrs.locality_attributes(topo, fn, lists=lists)
    attrs[f"{d}/pciAddress"] = fn.address
    attrs[f"{d}/type"] = selection.kind_of(fn)
    attrs[pciattrs.KIND] = "accelerator"
    attrs.update(pciattrs.identity_attributes(fn, d))
    name = host.product_names.get(fn.address)
    if name:
        pciattrs.put(attrs, f"{d}/productName", cut(" ".join(name.split())))
    speed = link_speed(topo, fn)
    pciattrs.put(attrs, f"{d}/pcieLinkSpeed", speed)
    pciattrs.put(attrs, f"{d}/pcieLinkGeneration", generation(speed))
    pciattrs.put(attrs, f"{d}/pcieLinkWidth", fn.link.current_width if fn.link is not None else None)
    pciattrs.put(attrs, f"{d}/iommuGroup", fn.iommu_group)
    pciattrs.put(attrs, f"{d}/sriovRole", fn.sriov.role if fn.sriov is not None else None)
    attrs.update(pciattrs.sriov_attributes(topo, fn, d))
    return attrs


def _within_limits(
    attrs: dict[str, AttributeValue], capacity: dict[str, Capacity]
) -> dict[str, AttributeValue]:
    room = MAX_KEYS - len(capacity)
    return attrs if len(attrs) <= room else dict(list(attrs.items())[:room])


def nodes_of(fn: PciFunction, host: HostInfo) -> tuple[tuple[Node, ...], tuple[Node, ...], str | None]:
    """Own nodes, claim-wide nodes and a problem (why prepare must refuse), from what sysfs says."""
    own: list[Node] = []
    shared: list[Node] = []
    problem = None
    found = fn.device_nodes + host.extra_nodes.get(fn.address, ())
    for kind in ("drm-render", "drm-card", "accel", "ve"):
        own += [Node(n.dev_path, n.major, n.minor) for n in found if n.kind == kind]
    if fn.driver == "vfio-pci":
        groups = [n for n in found if n.kind == "vfio-group"]
        if not groups:
            problem = f"bound to vfio-pci but in no IOMMU group ({fn.sysfs_path}/iommu_group)"
        own += [Node(n.dev_path, n.major, n.minor) for n in groups]
        own += [Node(n.dev_path, n.major, n.minor, optional=True) for n in found if n.kind == "vfio-device"]
        vfio = host.vfio_container
        shared.append(Node("/dev/vfio/vfio", vfio[0] if vfio else None, vfio[1] if vfio else None))
    elif fn.driver == "nvidia":
        major = host.char_majors.get("nvidia-frontend", host.char_majors.get("nvidia", NVIDIA_MAJOR))
        minor = host.nvidia_minors.get(fn.address)
        if minor is None:
            problem = (
                f"bound to nvidia, but proc/driver/nvidia/gpus/{fn.address}/information gives no Device Minor"
            )
        else:
            own.append(Node(f"/dev/nvidia{minor}", major, minor))
        uvm = host.char_majors.get("nvidia-uvm")
        shared.append(Node("/dev/nvidiactl", major, NVIDIA_CTL_MINOR))
        shared.append(Node("/dev/nvidia-uvm", uvm, 0 if uvm is not None else None, optional=True))
        shared.append(Node("/dev/nvidia-uvm-tools", uvm, 1 if uvm is not None else None, optional=True))
    elif fn.driver is None:
        problem = "no kernel driver is bound"
    return tuple(own), tuple(shared), problem


def accelerator(
    topo: Topology, fn: PciFunction, host: HostInfo, reason: str = "", *, lists: bool = False
) -> Accelerator:
    """The device for one selected function (pure)."""
    capacity: dict[str, Capacity] = {}
    memory = host.memory_bytes.get(fn.address)
    if memory:
        capacity[MEMORY] = Capacity(str(memory))
    attrs = _within_limits(attributes(topo, fn, host, lists=lists), capacity)
    own, shared, problem = nodes_of(fn, host)
    return Accelerator(
        device=Device(pciattrs.device_name(fn.address), attrs, capacity),
        address=fn.address,
        driver=fn.driver,
        nodes=own,
        shared_nodes=shared,
        problem=problem,
        aer_fatal=fn.aer_fatal_total,
        reason=reason,
    )


def build_accelerators(
    topo: Topology,
    host: HostInfo,
    options: AcceleratorOptions,
    chosen: Sequence[selection.Verdict] | None = None,
) -> list[Accelerator]:
    """Every accelerator to publish, sorted by name (stable slices across rescans)."""
    picked = chosen if chosen is not None else selection.verdicts(topo, options)
    lists = options.list_attributes
    out = [accelerator(topo, v.function, host, v.reason, lists=lists) for v in picked if v.selected]
    out.sort(key=lambda a: a.name)
    return out


def build_devices(topo: Topology, host: HostInfo, options: AcceleratorOptions) -> list[Device]:
    return [a.device for a in build_accelerators(topo, host, options)]
