"""`topodra slices`: print the ResourceSlices a driver would publish on this machine, no cluster.

The output is built by the publisher's own code (validation, chunking, naming), so it is what
`serve` writes, except for what only a cluster knows: the owner reference carries a
placeholder Node UID unless `--node-uid` is given, and each slice has a fixed
`metadata.name` (the publisher's `generateName` without its trailing dash) where `serve` lets
the server add 5 random characters, because `kubectl apply` refuses generateName. YAML and JSON
are one `kind: List`, which kubectl reads (`topodra slices | kubectl apply --dry-run=server -f
-`); `text` and `wide` are tables for people. Devices or attributes that validation leaves out
are reported on stderr, naming the device and the rule; the exit status is then 3 (the slices
still print).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path
from typing import Any

from topodra.drivers import flags, registry
from topodra.drivers.cli.formats import add_output_argument, write_report
from topodra.drivers.cli.inspect import add_root_argument, root_problem

EXIT_CONFIG = 2
EXIT_PROBLEMS = 3


SUMMARY = "print the ResourceSlices a driver would publish"
EXAMPLES = (
    ("topodra slices --driver all -o wide", "this machine's devices as the drivers would publish them"),
    (
        "topodra slices --driver nic | kubectl apply --dry-run=server -f -",
        "ask a cluster whether it accepts them",
    ),
    ("topodra slices --driver accelerator --sysfs-root /tmp/hgx -o json", "a synthetic machine's, as JSON"),
)
EXITS = {
    2: "a flag or the sysfs root is wrong, or a driver could not start (one line says which)",
    3: "printed, but validation left devices or attributes out (stderr names each)",
}


def register(subparsers: Any) -> None:
    from topodra.drivers.cli.usage import command

    p = command(subparsers, "slices", __doc__, help=SUMMARY, examples=EXAMPLES, exits=EXITS)
    p.add_argument("--driver", choices=[*registry.KINDS, "all"], required=True)
    add_root_argument(p)
    p.add_argument(
        "--node-name",
        type=flags.node_name,
        default=os.environ.get("NODE_NAME") or socket.gethostname().lower(),
        help="default: $NODE_NAME, else the host name",
    )
    p.add_argument(
        "--node-uid",
        type=flags.uid,
        default=None,
        help="the Node's UID for ownerReferences (default: a placeholder)",
    )
    add_output_argument(p, ("yaml", "json", "text", "wide"), "yaml", what="the slices")
    p.add_argument(
        "--kubernetes-version",
        type=flags.kubernetes_version,
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
    from topodra.common.inventory import Inventory
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
            devices = Inventory(driver).refresh().devices  # as the driver would publish them now
        except Exception as err:
            what = str(err) if isinstance(err, ValueError) else f"{type(err).__name__}: {err}"
            print(f"topodra slices: driver {kind}: {what}", file=sys.stderr)
            return EXIT_CONFIG
        desired = build_desired(driver.name, args.node_name, args.node_uid, devices, limits=limits)
        for p in desired.problems:
            print(f"topodra slices: {driver.name}: {p}", file=sys.stderr)
        problems += len(desired.problems)
        slices.extend(named(s) for s in desired.slices)
    from topodra.drivers.cli.slices_table import render, rows

    write_report(args.output, lambda: as_list(slices), lambda wide: render(rows(slices, wide=wide)))
    return EXIT_PROBLEMS if problems else 0


def named(obj: dict[str, Any]) -> dict[str, Any]:
    """The slice with a fixed name instead of generateName (kubectl apply needs a name)."""
    meta = dict(obj["metadata"])
    generate = meta.pop("generateName", None)
    if generate and "name" not in meta:
        meta = {"name": generate.rstrip("-"), **meta}
    return {**obj, "metadata": meta}


def as_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    """A `v1 List`, the shape `kubectl get -o yaml` prints and `kubectl apply -f` reads."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}
