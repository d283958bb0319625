"""`topodra inspect`: what discovery sees on this machine (or a captured tree).

Imports stay minimal on purpose: this path must cost less than lstopo on the same tree, so no
grpc, kubernetes client or yaml here.
"""

from __future__ import annotations

import argparse
import gc
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
    if os.path.isfile(root) and root.endswith((".tar.xz", ".txz", ".tar")):
        return (
            f"--sysfs-root {root} is an archive (a capture?); unpack it and pass the folder: "
            f"mkdir m && tar -xf {root} -C m"
        )
    if not os.path.isdir(root):
        return f"--sysfs-root {root}: no such folder"
    if os.path.isdir(os.path.join(root, "sys", "devices", "system", "cpu")):
        from topodra.common.topology.discover import NotASysfsTree, check_root

        try:  # as discovery will look it up: beneath the root, a link out of it does not count
            check_root(root)
        except NotASysfsTree:
            return f"--sysfs-root {root}: its sys/devices/system/cpu leads out of it (a link); not a capture"
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
    add_output_argument(p, OUTPUTS, "text", what="the topology (svg, png: a picture; png needs rsvg-convert)")
    p.add_argument(
        "--only",
        type=_only,
        default=None,
        metavar="KINDS",
        help="show only these kinds, comma-separated: cpus, accelerators, nics, storage, other "
        "(default: all)",
    )
    p.add_argument(
        "--pci-ids",
        action="append",
        default=None,
        metavar="FILE",
        help="pci.ids database for vendor and device names (repeatable; default: the system's, "
        "/usr/share/misc/pci.ids or /usr/share/hwdata/pci.ids, when there)",
    )
    p.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="auto (default): on a terminal unless NO_COLOR is set",
    )
    p.set_defaults(run=run)


OUTPUTS = ("text", "wide", "json", "yaml", "svg", "png")


def _only(text: str) -> frozenset[str]:
    from topodra.drivers.cli.inspect_view import parse_only

    try:
        return parse_only(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def run(args: argparse.Namespace) -> int:
    # Discovery and the output allocate tens of thousands of objects and leave no cycles behind:
    # the collector's passes over them cost ~8% of the CPU of an inspect of a 256-CPU tree
    # (hack/bench-peer). Paused for this command only, and restored for whoever called it.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _run(args)
    finally:
        if collecting:
            gc.enable()


def _run(args: argparse.Namespace) -> int:
    problem = root_problem(args.sysfs_root)
    if problem is not None:
        from topodra.drivers.cli.usage import fail

        return fail("inspect", problem)
    from topodra.common.topology.discover import discover

    for path in args.pci_ids or ():
        if not os.path.isfile(path):
            from topodra.drivers.cli.usage import fail

            return fail("inspect", f"--pci-ids {path}: no such file")
    topology = discover(args.sysfs_root)
    if args.output in ("json", "yaml"):
        from topodra.common.topology.jsonview import dumps, to_json

        doc = to_json(topology)
        if args.only is not None:
            doc = _filtered(doc, topology, args.only)
        if args.output == "json":
            sys.stdout.write(dumps(doc))
        else:
            from topodra.drivers.cli.formats import dump

            sys.stdout.write(dump(doc, "yaml"))
        return 0
    from topodra.drivers.cli.inspect_view import KINDS, build

    view = build(topology, args.only or frozenset(KINDS), tuple(args.pci_ids or ()))
    if args.output in ("svg", "png"):
        from topodra.drivers.cli.inspect_svg import render as render_svg

        svg = render_svg(view)
        if args.output == "svg":
            sys.stdout.write(svg)
            return 0
        return _png(svg)
    from topodra.drivers.cli.inspect_text import render
    from topodra.drivers.cli.term import Paint, wanted

    paint = Paint(wanted(args.color, sys.stdout))
    sys.stdout.write(render(view, paint, wide=args.output == "wide"))
    return 0


def _png(svg: str) -> int:
    """PNG through librsvg's rsvg-convert when it is installed: drawing text well is its job,
    and a rasterizer of our own would cost more than the picture is worth."""
    import shutil
    import subprocess

    from topodra.drivers.cli.usage import EXIT_FAILED, fail

    tool = shutil.which("rsvg-convert")
    if tool is None:
        return fail(
            "inspect", "-o png needs rsvg-convert (Debian/Ubuntu: librsvg2-bin); -o svg needs nothing"
        )
    if sys.stdout.isatty():
        return fail("inspect", "-o png writes binary data: redirect it to a file (> machine.png)")
    done = subprocess.run([tool, "--format=png"], input=svg.encode(), capture_output=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(
            f"topodra inspect: rsvg-convert failed: {done.stderr.decode(errors='replace')[:500]}\n"
        )
        return EXIT_FAILED
    sys.stdout.flush()
    sys.stdout.buffer.write(done.stdout)
    return 0


CPU_KEYS = ("cpus", "packages", "cores", "caches", "numa_nodes")


def _filtered(doc: dict[str, Any], topology: Any, kinds: frozenset[str]) -> dict[str, Any]:
    """`--only` on JSON/YAML: the PCI functions of the chosen kinds (VFs with their PF) and
    their interfaces; the CPU lists only with `cpus`."""
    from topodra.drivers.cli.inspect_view import build

    view = build(topology, kinds)
    keep = set(view.by_address)
    out = dict(doc)
    out["pci_devices"] = [p for p in doc["pci_devices"] if p["address"] in keep]
    out["net_interfaces"] = [i for i in doc["net_interfaces"] if i.get("pci_address") in keep]
    if "rdma_devices" in doc:
        out["rdma_devices"] = [r for r in doc["rdma_devices"] if r.get("pci_address") in keep]
    if "cpus" not in kinds:
        for key in CPU_KEYS:
            out.pop(key, None)
    return out
