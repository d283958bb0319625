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
import json
import os
import socket
import sys
from typing import Any

from topodra.drivers.cli.inspect import add_root_argument, root_problem

EXIT_CANNOT = 2
OUTPUTS = ("text", "wide", "json", "yaml")


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "check",
        help="check every driver's topology attributes on this node against the machine",
        description=__doc__.splitlines()[0],
    )
    p.add_argument(
        "--node",
        "--node-name",
        dest="node",
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
    p.add_argument(
        "--kubeconfig", default=None, help="default: $KUBECONFIG, else the in-cluster service account"
    )
    p.add_argument(
        "-o", "--output", choices=OUTPUTS, default="text", help="text (default), wide, json or yaml"
    )
    p.add_argument(
        "--watch", action="store_true", help="keep checking; metric and Node Event on disagreement"
    )
    p.add_argument(
        "--interval", type=float, default=300.0, metavar="SECONDS", help="--watch: re-read sysfs this often"
    )
    p.add_argument("--metrics-address", default="", help="--watch: host:port for /metrics (e.g. :9403)")
    p.add_argument("--no-events", action="store_true", help="--watch: do not write Events")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(run=run)


def _fail(message: str) -> int:
    print(f"topodra check: {message}", file=sys.stderr)
    return EXIT_CANNOT


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
        try:
            slices = _read_file(args.slices)
        except (OSError, ValueError) as err:
            return _fail(str(err))
    else:
        node = node or os.environ.get("NODE_NAME") or socket.gethostname().lower()
        try:
            slices = _read_api(args.kubeconfig, node)
        except Exception as err:
            return _fail(f"reading the ResourceSlices of node {node}: {err}")
    try:
        devices = node_devices(slices, node)
    except SliceInputError as err:
        return _fail(str(err))
    report = build_report(discover(args.sysfs_root), devices)
    _print(report, args.output)
    return report.exit_code


def _read_file(path: str) -> list[dict[str, Any]]:
    from topodra.common.objectfile import MAX_BYTES, load_objects, of_kind

    if path == "-":
        text = sys.stdin.read(MAX_BYTES + 1)
        source = "stdin"
    else:
        if os.path.isdir(path):
            raise ValueError(f"--slices {path} is a folder; name a file")
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(MAX_BYTES + 1)
        source = path
    return of_kind(load_objects(text, source), "ResourceSlice")


def _read_api(kubeconfig: str | None, node: str) -> list[dict[str, Any]]:
    from topodra.common import kube
    from topodra.common.check.watch import list_node_slices

    client = kube.new_api_client(kubeconfig or os.environ.get("KUBECONFIG") or None)
    return list_node_slices(client, node)


def _print(report: Any, output: str) -> None:
    from topodra.common.check import to_json

    if output == "json":
        sys.stdout.write(json.dumps(to_json(report), indent=2) + "\n")
    elif output == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(to_json(report), sort_keys=False, default_flow_style=False))
    else:
        from topodra.drivers.cli.check_text import render

        sys.stdout.write(render(report, wide=output == "wide"))


def _watch(args: argparse.Namespace) -> int:
    from topodra.common import kube, logs
    from topodra.common.check.watch import Watcher

    logs.setup(args.log_level.upper())
    node = args.node or os.environ.get("NODE_NAME") or ""
    if not node:
        return _fail("--watch needs the node: pass --node or set NODE_NAME")
    try:
        client = kube.new_api_client(args.kubeconfig or os.environ.get("KUBECONFIG") or None)
    except Exception as err:
        return _fail(f"API client: {err}")
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
