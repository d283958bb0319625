"""The /dev nodes a machine would have for its devices, and harmless stand-ins for them.

Drivers hand containers paths like /dev/dri/renderD128; a test that starts a real container
needs those paths to exist. With `dev_nodes` the build creates them under DIR/dev as character
devices with the numbers of /dev/null (1:3), so a container that opens one touches nothing.
The manifest records each node's real numbers (the ones sysfs `dev` files show).
"""

from __future__ import annotations

from dataclasses import dataclass

from topodra.common.synth.plan import (
    ACCEL_MAJOR,
    DRM_MAJOR,
    UVERBS_MAJOR,
    UVERBS_MINOR_BASE,
    VFIO_DEV_MAJOR,
    VFIO_GROUP_MAJOR,
    Plan,
)

HARMLESS = (1, 3)  # /dev/null
NVIDIA_MAJOR = 195
MISC_MAJOR = 10


@dataclass(frozen=True)
class DevNode:
    path: str  # absolute, as a container sees it: /dev/dri/renderD128
    major: int
    minor: int
    pci: str | None  # the function it belongs to; None for shared nodes (/dev/vfio/vfio, nvidiactl)


def device_nodes(plan: Plan) -> list[DevNode]:
    nodes: list[DevNode] = []
    nvidia = 0
    groups: set[int] = set()
    for f in plan.functions:
        if f.drm_card is not None:
            nodes.append(DevNode(f"/dev/dri/card{f.drm_card}", DRM_MAJOR, f.drm_card, f.bdf))
        if f.drm_render is not None:
            nodes.append(DevNode(f"/dev/dri/renderD{f.drm_render}", DRM_MAJOR, f.drm_render, f.bdf))
        if f.accel is not None:
            nodes.append(DevNode(f"/dev/accel/accel{f.accel}", ACCEL_MAJOR, f.accel, f.bdf))
        if f.uverbs is not None:
            nodes.append(
                DevNode(
                    f"/dev/infiniband/uverbs{f.uverbs}", UVERBS_MAJOR, UVERBS_MINOR_BASE + f.uverbs, f.bdf
                )
            )
        if f.vfio_dev is not None:
            nodes.append(DevNode(f"/dev/vfio/devices/vfio{f.vfio_dev}", VFIO_DEV_MAJOR, f.vfio_dev, f.bdf))
            if f.iommu_group not in groups:
                groups.add(f.iommu_group)
                nodes.append(DevNode(f"/dev/vfio/{f.iommu_group}", VFIO_GROUP_MAJOR, len(groups) - 1, f.bdf))
        if f.driver == "nvidia" and f.role != "vf":
            nodes.append(DevNode(f"/dev/nvidia{nvidia}", NVIDIA_MAJOR, nvidia, f.bdf))
            nvidia += 1
    if groups:
        nodes.append(DevNode("/dev/vfio/vfio", MISC_MAJOR, 196, None))
    if nvidia:
        nodes.append(DevNode("/dev/nvidiactl", NVIDIA_MAJOR, 255, None))
        nodes.append(DevNode("/dev/nvidia-uvm", 510, 0, None))
    if plan.rdma:
        nodes.append(DevNode("/dev/infiniband/rdma_cm", MISC_MAJOR, 58, None))
    return nodes
