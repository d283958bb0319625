"""Accelerator driver `accelerator.topodra.io`: vendor-neutral PCI accelerators with full locality.

Light on purpose: the registry imports this for every CLI call; discovery and the driver load
only in `create`.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from topodra.drivers import flags
from topodra.drivers.accelerator import options as _options

if TYPE_CHECKING:
    from topodra.drivers.accelerator.driver import AcceleratorDriver
    from topodra.drivers.registry import CommonOptions

NAME = "accelerator.topodra.io"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _options.add_arguments(parser)


def create(options: CommonOptions) -> AcceleratorDriver:
    from topodra.common.topology.discover import check_root
    from topodra.drivers.accelerator.driver import AcceleratorDriver

    check_root(options.sysfs_root)  # a wrong --sysfs-root fails at start, naming the folder
    try:
        opts = _options.from_args(options.args, options.sysfs_root, options.node_name)
    except _options.OptionError as e:
        raise ValueError(str(e)) from e
    # checked here, on the machine that reads them, not by the parser (a chart's values are
    # parsed elsewhere too): a mistyped path would otherwise silently give no product names
    for path in opts.pci_ids:
        try:
            flags.readable_file(path)
        except argparse.ArgumentTypeError as e:
            raise ValueError(f"--accelerator-pci-ids: {e}") from None
    return AcceleratorDriver(opts)
