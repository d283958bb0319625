"""The cpu.topodra.io driver: CPUs in the shared topology language, pinned for real.

Kept light: the registry imports this module to add flags; the driver itself loads in `create`.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from topodra.drivers.cpu import options as _options

if TYPE_CHECKING:
    from topodra.drivers.cpu.driver import CpuDriver
    from topodra.drivers.registry import CommonOptions

NAME = "cpu.topodra.io"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _options.add_arguments(parser)


def create(options: CommonOptions) -> CpuDriver:
    from topodra.common.topology import discover
    from topodra.drivers.cpu.driver import CpuDriver

    return CpuDriver(discover(options.sysfs_root), _options.from_args(options.args), options.sysfs_root)
