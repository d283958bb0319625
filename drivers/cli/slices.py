"""`topodra slices`: print the ResourceSlices a driver would publish on this machine, no cluster.

The output is built by the publisher's own code (validation, chunking, naming), so it is exactly
what `serve` writes, except two things only a cluster knows: the owner reference carries a
placeholder Node UID unless `--node-uid` is given, and the server appends 5 random characters
to each `metadata.generateName`. Devices or attributes that validation leaves out are reported
on stderr, naming the device and the rule; the exit status is then 3 (the slices still print).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from topodra.drivers import registry
from topodra.drivers.cli.inspect import add_root_argument, root_problem

EXIT_CONFIG = 2
EXIT_PROBLEMS = 3


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "slices", help="print the ResourceSlices a driver would publish", description=__doc__.splitlines()[0]
    )
    p.add_argument("--driver", choices=[*registry.KINDS, "all"], required=True)
    add_root_argument(p)
    p.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME") or socket.gethostname().lower(),
        help="default: $NODE_NAME, else the host name",
    )
    p.add_argument(
        "--node-uid", default=None, help="the Node's UID for ownerReferences (default: a placeholder)"
    )
    p.add_argument("--output", choices=("yaml", "json"), default="yaml")
    p.add_argument(
        "--kubernetes-version",
        default=None,
        metavar="X.Y",
        help="validate with the limits of this API server version (e.g. 1.34: ≤4 taints, no list "
        "attributes); default: the newest rules",
    )
    registry.add_arguments(p, list(registry.KINDS))  # every driver's flags: `all` takes them all
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    problem = root_problem(args.sysfs_root)
    if problem is not None:
        print(f"topodra slices: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    from topodra.common.publisher.build import build_desired
    from topodra.common.publisher.names import is_dns_subdomain
    from topodra.common.publisher.validation import limits_for

    try:
        limits = limits_for(args.kubernetes_version)
    except ValueError as err:
        print(f"topodra slices: --kubernetes-version: {err}", file=sys.stderr)
        return EXIT_CONFIG

    if not is_dns_subdomain(args.node_name):
        print(f"topodra slices: --node-name {args.node_name!r} is not a valid node name", file=sys.stderr)
        return EXIT_CONFIG
    kinds = list(registry.KINDS) if args.driver == "all" else [args.driver]
    common = registry.CommonOptions(sysfs_root=Path(args.sysfs_root), node_name=args.node_name, args=args)
    slices: list[dict[str, Any]] = []
    problems = 0
    for kind in kinds:
        try:
            driver = registry.create(kind, common)
            devices = list(driver.devices())
            counter_sets = list(getattr(driver, "counter_sets", lambda: ())())
        except Exception as err:
            print(f"topodra slices: driver {kind}: {type(err).__name__}: {err}", file=sys.stderr)
            return EXIT_CONFIG
        desired = build_desired(
            driver.name, args.node_name, args.node_uid, devices, counter_sets=counter_sets, limits=limits
        )
        for p in desired.problems:
            print(f"topodra slices: {driver.name}: {p}", file=sys.stderr)
        problems += len(desired.problems)
        slices.extend(desired.slices)
    if args.output == "json":
        sys.stdout.write(json.dumps(slices, indent=2) + "\n")
    else:
        import yaml

        sys.stdout.write(yaml.safe_dump(slices, sort_keys=False, default_flow_style=False))
    return EXIT_PROBLEMS if problems else 0
