"""`topodra inspect`: what discovery sees on this machine (or a captured tree).

Imports stay minimal on purpose: this path must cost less than lstopo on the same tree, so no
grpc, kubernetes client or yaml here.
"""

from __future__ import annotations

import argparse
import os
import sys

# for annotations only (strings here): importing typing costs milliseconds on the inspect path
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def add_root_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sysfs-root",
        default="/",
        metavar="DIR",
        help="folder that contains sys/ (default /: this machine); an unpacked capture works",
    )


def root_problem(root: str) -> str | None:
    """One clear sentence when `root` is not a sysfs root, else None."""
    if not os.path.isdir(root):
        return f"--sysfs-root {root}: no such folder"
    if os.path.isdir(os.path.join(root, "sys", "devices", "system", "cpu")):
        return None
    if os.path.isdir(os.path.join(root, "devices", "system", "cpu")):
        parent = os.path.dirname(os.path.abspath(root))
        return f"--sysfs-root {root} is the sys folder itself; pass the folder that contains it ({parent})"
    return f"--sysfs-root {root} is not a sysfs tree: it has no sys/devices/system/cpu"


EXAMPLES = (
    (
        "topodra inspect",
        "this machine: CPUs, PCI tree, what sits with what, and the attribute that aligns it",
    ),
    ("topodra inspect --only accelerators,nics", "only accelerators and NICs"),
    ("topodra inspect --sysfs-root /tmp/hgx -o wide", "a synthetic machine, every VF and the whole matrix"),
    ("topodra inspect -o json | jq '.pci_devices[0]'", "discovery's data, for scripts"),
)


def register(subparsers: Any) -> None:
    from topodra.drivers.cli.formats import add_output_argument
    from topodra.drivers.cli.usage import epilog

    p = subparsers.add_parser(
        "inspect",
        help="show the machine's topology as discovery sees it",
        description="Show the machine's topology as discovery sees it: which devices sit together and "
        "which claim attribute lines them up.",
        epilog=epilog(EXAMPLES),
    )
    add_root_argument(p)
    add_output_argument(p, ("text", "json"), "text", what="the topology")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    problem = root_problem(args.sysfs_root)
    if problem is not None:
        from topodra.drivers.cli.usage import fail

        return fail("inspect", problem)
    from topodra.common.topology.discover import discover

    topology = discover(args.sysfs_root)
    if args.output == "json":
        from topodra.common.topology.jsonview import dumps, to_json

        sys.stdout.write(dumps(to_json(topology)))
    else:
        from topodra.drivers.cli.inspect_text import render

        sys.stdout.write(render(topology))
    return 0
