"""One IOMMU group, one claim: a VFIO group's node (`/dev/vfio/<group>`) is a key to every
function of the group. Whoever opens it can ask for any of their device handles, and the kernel
lets one process at a time have it. Two functions of one group handed to two claims would give
the first pod to open it the other's device, and the other pod nothing. The accelerator and NIC
drivers ask this before they hand out a function bound to vfio-pci."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from topodra.common.runtime.driver import ClaimRef

_GROUP_NODE = re.compile(r"/dev/vfio/(?:noiommu-)?[0-9]+")


def group_nodes(paths: Iterable[str]) -> frozenset[str]:
    """The VFIO group nodes among device node paths (not /dev/vfio/vfio, not the per-device
    /dev/vfio/devices/vfioN of the iommufd interface)."""
    return frozenset(p for p in paths if _GROUP_NODE.fullmatch(p))


def shared_group(mine: Iterable[str], others: Iterable[tuple[str, Iterable[str]]]) -> tuple[str, str] | None:
    """(the other's label, the group node) when a device with node paths `mine` shares a VFIO
    group with one of `others` (label, its node paths), else None."""
    groups = group_nodes(mine)
    if not groups:
        return None
    for label, paths in others:
        common = groups & group_nodes(paths)
        if common:
            return label, min(common)
    return None


class Holding(Protocol):
    @property
    def claim(self) -> ClaimRef: ...


def held_by_others(
    claim: ClaimRef, held: Mapping[str, Holding], nodes: Callable[[str], Iterable[str] | None]
) -> Iterator[tuple[str, Iterable[str]]]:
    """The devices a driver holds for claims other than `claim`, labelled for refusal(), each with
    its node paths (`nodes`: None for a device no longer there). Lazy: walked only for a function
    bound to vfio-pci (shared_group)."""
    for device, h in held.items():
        paths = nodes(device) if h.claim.uid != claim.uid else None
        if paths is not None:
            yield f"{device} of claim {h.claim.namespace}/{h.claim.name}", paths


def refusal(device: str, mine: Iterable[str], others: Iterable[tuple[str, Iterable[str]]]) -> str | None:
    """Why `device` (its node paths `mine`) may not be handed out beside `others` (each another
    claim's device: its label and node paths), or None."""
    shared = shared_group(mine, others)
    if shared is None:
        return None
    other, node = shared
    return f"device {device} is in the IOMMU group of {other} ({node}): whoever opens the group reaches both"
