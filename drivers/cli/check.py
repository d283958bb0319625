"""`topodra check`: do the drivers of this node speak the same topology language as the machine?

Reads the ResourceSlices of every driver on the node (from the API server, or `--slices FILE` as
`kubectl get resourceslices -o yaml` or `topodra slices` print them), matches each device to the
machine's sysfs (`--sysfs-root`, default / : in the DaemonSet the node's own /sys), and reports
per driver and device which of pciBusID, pcieRoot and numaNode are published, missing, malformed
or wrong, and for every pair of drivers at which levels `matchAttribute` can align their devices.

Exit status: 0 when every published value agrees with the machine (missing attributes are
warnings), 1 when a published value is wrong or malformed, 2 when the check could not run (bad
flags, unreadable input, API errors). `--watch` runs until stopped, re-checking when the node's
slices change, and publishes a metric and an Event on the Node when they disagree.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any

from topodra.drivers.cli.inspect import add_root_argument, root_problem

EXIT_WRONG = 1
EXIT_CANNOT = 2
OUTPUTS = ("text", "wide", "json", "yaml")

SUMMARY = "check every driver's topology attributes on this node against the machine"
EXAMPLES = (
    ("topodra check", "on a node (or in the DaemonSet pod): this node's slices of every driver vs its /sys"),
    ("topodra check --node worker-3 --kubeconfig ~/.kube/config -o wide", "from a laptop, every device"),
    (
        "kubectl get resourceslices -o yaml > s.yaml; topodra check --slices s.yaml --sysfs-root /tmp/m",
        "offline, a driver author's CI: slices and a machine capture (or topodra synth)",
    ),
    ("topodra check --watch --metrics-address :9403", "the DaemonSet's agent: metric and Node Event"),
)
EXITS = {
    0: "every published value agrees with the machine (missing attributes are warnings)",
    EXIT_WRONG: "a published value is wrong or malformed (the report names each)",
    EXIT_CANNOT: "a flag or the input is wrong, or the slices could not be read (one line says)",
}


def register(subparsers: Any) -> None:
    from topodra.drivers import flags
    from topodra.drivers.cli.arguments import add_kubeconfig_argument, add_log_level_argument
    from topodra.drivers.cli.formats import add_output_argument
    from topodra.drivers.cli.usage import command

    p = command(subparsers, "check", __doc__, help=SUMMARY, examples=EXAMPLES, exits=EXITS)
    p.add_argument(
        "--node",
        "--node-name",
        dest="node",
        type=flags.node_name,
        default=None,
        metavar="NODE",
        help="the node to check (default: $NODE_NAME, else the host name; with --slices: the only "
        "node the file names)",
    )
    p.add_argument(
        "--slices",
        default=None,
        metavar="FILE",
        help="read slices from FILE ('-': stdin) instead of the API server: kubectl get "
        "resourceslices -o yaml|json, or topodra slices output",
    )
    add_root_argument(p)
    add_kubeconfig_argument(p, as_kubectl=True)
    add_output_argument(p, OUTPUTS, "text", what="the report")
    p.add_argument(
        "--watch", action="store_true", help="keep checking; metric and Node Event on disagreement"
    )
    p.add_argument(
        "--interval",
        type=flags.seconds,
        default=300.0,
        metavar="SECONDS",
        help="--watch: re-read sysfs this often (default 300, at least 5)",
    )
    p.add_argument(
        "--metrics-address",
        type=flags.host_port,
        default="",
        help="--watch: host:port for /metrics (e.g. :9403)",
    )
    p.add_argument("--no-events", action="store_true", help="--watch: do not write Events")
    add_log_level_argument(p)
    p.set_defaults(run=run)


def _fail(message: str) -> int:
    from topodra.drivers.cli.usage import fail

    return fail("check", message)


def run(args: argparse.Namespace) -> int:
    problem = root_problem(args.sysfs_root)
    if problem is not None:
        return _fail(problem)
    if args.interval < 5:
        return _fail(f"--interval {args.interval:g}: at least 5 seconds")
    if args.watch and args.slices is not None:
        return _fail("--watch reads the API server; it cannot be combined with --slices")
    if args.watch:
        return _watch(args)
    from topodra.common.check import SliceInputError, build_report, node_devices
    from topodra.common.topology import discover

    node = args.node
    if args.slices is not None:
        from topodra.common.objectfile import of_kind, read_objects

        try:
            slices = of_kind(read_objects(args.slices, "--slices"), "ResourceSlice")
        except ValueError as err:
            return _fail(str(err))
    else:
        here = os.environ.get("NODE_NAME") or socket.gethostname().lower()
        node = node or here
        if node != here and os.path.abspath(args.sysfs_root) == "/":
            print(
                f"topodra check: note: node {node}'s slices are compared with this machine's /sys "
                f"({here}); pass --sysfs-root with a capture of {node} unless it is this machine",
                file=sys.stderr,
            )
        try:
            slices = _read_api(args.kubeconfig, node)
        except ValueError as err:  # a kubeconfig that does not work, an API read that failed
            return _fail(f"reading the ResourceSlices of node {node}: {err}")
    try:
        devices = node_devices(slices, node)
    except SliceInputError as err:
        return _fail(str(err))
    report = build_report(discover(args.sysfs_root), devices)
    _print(report, args.output)
    return report.exit_code


def _read_api(kubeconfig: str | None, node: str) -> list[dict[str, Any]]:
    from topodra.common.check.watch import list_node_slices
    from topodra.common.kubeapi.errors import ApiError
    from topodra.drivers.cli.apiclient import client_as_kubectl, say

    client = client_as_kubectl(kubeconfig)
    try:
        return list_node_slices(client, node)
    except ApiError as err:
        raise ValueError(say(err)) from None


def _print(report: Any, output: str) -> None:
    from topodra.common.check import to_json
    from topodra.drivers.cli.check_text import render
    from topodra.drivers.cli.formats import write_report

    write_report(output, lambda: to_json(report), lambda wide: render(report, wide=wide))


def _watch(args: argparse.Namespace) -> int:
    from topodra.common import logs
    from topodra.common.check.watch import Watcher
    from topodra.drivers.cli.apiclient import client_as_kubectl

    logs.setup(args.log_level.upper())
    node = args.node or os.environ.get("NODE_NAME") or ""
    if not node:
        return _fail("--watch needs the node: pass --node or set NODE_NAME")
    try:
        client = client_as_kubectl(args.kubeconfig)
    except ValueError as err:
        return _fail(str(err))
    watcher = Watcher(
        client,
        node,
        args.sysfs_root,
        interval=args.interval,
        events=not args.no_events,
        metrics_address=args.metrics_address,
    )
    try:
        watcher.serve_forever()
    except ValueError as err:
        return _fail(str(err))
    return 0
