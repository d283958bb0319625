"""Sysfs topology discovery: `discover(root)` returns an immutable `Topology`."""

from topodra.common.topology.discover import NotASysfsTree, discover
from topodra.common.topology.model import Topology

__all__ = ["NotASysfsTree", "Topology", "discover"]
