"""The cpu.topodra.io driver: CPUs in the shared topology language, pinned for real.

Kept light: the registry imports this module to add flags; the driver itself loads in `create`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from topodra.drivers.cpu import options as _options

if TYPE_CHECKING:
    from topodra.drivers.cpu.driver import CpuDriver
    from topodra.drivers.registry import CommonOptions

NAME = "cpu.topodra.io"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _options.add_arguments(parser)


def discovery_root(path: Path) -> Path:
    """The folder that contains `sys/`. Given the sysfs mount itself (`serve` defaults
    --sysfs-root to /sys), its parent is meant."""
    if path.name == "sys" and not (path / "sys").is_dir() and (path / "devices" / "system" / "cpu").is_dir():
        return path.parent
    return path


def create(options: CommonOptions) -> CpuDriver:
    from topodra.common.topology import discover
    from topodra.drivers.cpu.driver import CpuDriver

    root = discovery_root(Path(options.sysfs_root))
    topology = discover(root)
    opts = _options.from_args(options.args)
    problem = _options.reserved_problem(opts.reserved, topology)
    if problem is not None:
        raise ValueError(problem)
    return CpuDriver(topology, opts, root)
