"""Which drivers exist and how to build one from command-line options.

Each driver package exposes `NAME` (its DRA driver name), `add_arguments(parser)` for its own
flags and `create(options) -> Driver`. The CLI (`serve`, `slices`) goes through this table so it
never imports a driver it does not run.
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from topodra.common.runtime.driver import Driver

KINDS: dict[str, str] = {
    "cpu": "topodra.drivers.cpu",
    "accelerator": "topodra.drivers.accelerator",
    "nic": "topodra.drivers.nic",
}


@dataclass(frozen=True, slots=True)
class CommonOptions:
    """Options every driver receives; driver-specific flags stay in `args`."""

    sysfs_root: Path
    node_name: str
    args: argparse.Namespace


def module(kind: str) -> ModuleType:
    if kind not in KINDS:
        raise ValueError(f"unknown driver {kind!r}; choose one of {', '.join(KINDS)}")
    return importlib.import_module(KINDS[kind])


def add_arguments(parser: argparse.ArgumentParser, kinds: list[str]) -> None:
    """The flags of each kind's package, once per package (two kinds may share one)."""
    done: set[str] = set()
    for kind in kinds:
        mod = module(kind)
        if mod.__name__ not in done:
            mod.add_arguments(parser)
            done.add(mod.__name__)


def create(kind: str, options: CommonOptions) -> Driver:
    driver: Driver = module(kind).create(options)
    return driver
