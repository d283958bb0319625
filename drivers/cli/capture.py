"""`topodra capture`: pack exactly the sysfs and proc files topodra reads into a .tar.xz.

The archive unpacks to `sys/` and `proc/` with links kept as relative links, so
`topodra inspect --sysfs-root <unpacked>` prints the same JSON as on the machine itself and the
accelerator driver sees the same devices (NVIDIA minors, device memory). That makes a user's
machine a test fixture without shipping their whole /sys.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from topodra.drivers.cli.inspect import add_root_argument, root_problem
from topodra.drivers.cli.usage import EXIT_FAILED, command, fail

if TYPE_CHECKING:
    from topodra.common.topology.model import Topology

SUFFIX = ".tar.xz"
SUMMARY = "pack the sysfs and proc files topodra reads into a .tar.xz"
EXAMPLES = (
    ("topodra capture --file me.tar.xz", "this machine's topology, to attach to a bug report"),
    ("mkdir m && tar -xJf me.tar.xz -C m && topodra inspect --sysfs-root m", "look at a capture"),
)
EXITS = {1: "the archive could not be written"}


def archive_path(text: str) -> str:
    """argparse type: a .tar.xz (what is written) in a folder that exists."""
    if not text.endswith(SUFFIX):
        raise argparse.ArgumentTypeError(f"{text!r}: the archive is xz-compressed tar; name it *{SUFFIX}")
    folder = os.path.dirname(text) or "."
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{text!r}: folder {folder} does not exist")
    return text


def _moved(text: str) -> str:
    raise argparse.ArgumentTypeError(
        f"capture writes its archive to --file FILE{SUFFIX} (--output names a format on other commands)"
    )


def register(subparsers: Any) -> None:
    p = command(subparsers, "capture", __doc__, help=SUMMARY, examples=EXAMPLES, exits=EXITS)
    add_root_argument(p)
    p.add_argument(
        "--file", "-f", required=True, type=archive_path, metavar=f"FILE{SUFFIX}", help="archive to write"
    )
    p.add_argument("-o", "--output", type=_moved, help=argparse.SUPPRESS)
    p.set_defaults(run=run)


def driver_edge_reads(root: Path, topo: Topology) -> None:
    """What the accelerator driver reads beside discovery, for every function: the driver's own
    include/exclude options decide which it publishes, and a capture must serve any of them."""
    from topodra.drivers.accelerator import probe

    probe.probe(root, topo.pci_devices, ())


def run(args: argparse.Namespace) -> int:
    problem = root_problem(args.sysfs_root)
    if problem is not None:
        return fail("capture", problem)
    from topodra.common.topology.capture import capture

    try:
        count = capture(args.sysfs_root, args.file, driver_edge_reads)
    except OSError as e:
        print(f"topodra capture: cannot write {args.file}: {e.strerror or e}", file=sys.stderr)
        return EXIT_FAILED
    print(f"wrote {args.file}: {count} entries", file=sys.stderr)
    return 0
