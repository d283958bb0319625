"""A minimal driver module in the registry's shape (NAME, add_arguments, create) for testing
`topodra slices` on the captured machines before, and independently of, the real drivers.

It publishes every usable CPU and every non-bridge PCI function with the standard topology
attributes, straight from discovery: raw enough that real trees' oddities (VMD 5-hex domains,
NUMA -1) reach the publisher's validation.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from topodra.common.device import AttributeValue, Device
from topodra.common.runtime.driver import Scan
from topodra.common.topology.discover import discover

NAME = "sample.topodra.io"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sample-limit", type=int, default=None, help="(test driver) at most N devices")


class SampleDriver:
    name = NAME

    def __init__(self, root: str, limit: int | None) -> None:
        self._root = root
        self._limit = limit

    def scan(self) -> Scan:
        topo = discover(self._root)
        out: list[Device] = []
        for cpu in topo.cpus:
            if not cpu.usable:
                continue
            attrs: dict[str, AttributeValue] = {"sample.topodra.io/cpu": cpu.id}
            if cpu.numa_node is not None:
                attrs["resource.kubernetes.io/numaNode"] = cpu.numa_node
            if cpu.package_id is not None:
                attrs["topology.topodra.io/socket"] = cpu.package_id
            out.append(Device(f"cpu-{cpu.id}", attrs))
        for fn in topo.pci_devices:
            if fn.is_bridge:
                continue
            attrs = {"resource.kubernetes.io/pciBusID": fn.address}
            if fn.pcie_root:
                attrs["resource.kubernetes.io/pcieRoot"] = fn.pcie_root
            if fn.numa_node is not None:
                attrs["resource.kubernetes.io/numaNode"] = fn.numa_node
            out.append(Device("pci-" + fn.address.replace(":", "-").replace(".", "-"), attrs))
        return Scan(tuple(out[: self._limit]))

    def prepare(self, *args: Any) -> Any:
        raise NotImplementedError

    def unprepare(self, *args: Any) -> None:
        raise NotImplementedError

    def restore(self, prepared: Mapping[Any, Any]) -> None:
        pass


def create(options: Any) -> SampleDriver:
    return SampleDriver(str(options.sysfs_root), options.args.sample_limit)
