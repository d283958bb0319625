"""`topodra capture`: pack exactly the sysfs files discovery reads into a .tar.xz.

The archive unpacks to `sys/` (and `proc/` when read) with links kept as relative links, so
`topodra inspect --sysfs-root <unpacked>` prints the same JSON as on the machine itself. That
makes a user's machine a test fixture without shipping their whole /sys.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from topodra.drivers.cli.inspect import add_root_argument, root_problem


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("capture", help="pack the sysfs files discovery reads into a .tar.xz")
    add_root_argument(p)
    p.add_argument("--output", required=True, metavar="FILE.tar.xz", help="archive to write")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    problem = root_problem(args.sysfs_root)
    if problem is not None:
        print(f"topodra capture: {problem}", file=sys.stderr)
        return 2
    from topodra.common.topology.capture import capture

    try:
        count = capture(args.sysfs_root, args.output)
    except OSError as e:
        print(f"topodra capture: cannot write {args.output}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(f"wrote {args.output}: {count} entries", file=sys.stderr)
    return 0
