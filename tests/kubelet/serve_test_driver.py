"""`topodra serve` exactly as shipped, with the `cpu` entry of the driver registry pointing at a
test driver module (this file): the registry is the driver boundary, so the CLI, the runtime,
the claim core, the API client and the publisher are all the real ones.

    python -m tests.kubelet.serve_test_driver serve cpu --node-name N ...
"""

from __future__ import annotations

import argparse
import sys

from topodra.common.runtime.driver import Driver
from topodra.drivers import registry

from tests.kubelet.standins import TableDriver

NAME = "cpu.topodra.io"  # the name deploy/base RBAC and policies know


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--test-devices", default="gpu-0,gpu-1,gpu-2", help="test driver: device names")


def create(options: registry.CommonOptions) -> Driver:
    return TableDriver(NAME, options.args.test_devices.split(","))


if __name__ == "__main__":
    registry.KINDS = {"cpu": "tests.kubelet.serve_test_driver"}  # imported again under that name
    from topodra.drivers.cli.main import main

    sys.exit(main(sys.argv[1:]))
