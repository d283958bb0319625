"""`topodra synth`: write the sysfs tree of a declared machine (see topodra.common.synth)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from topodra.drivers.cli.formats import add_output_argument, dump
from topodra.drivers.cli.usage import epilog, fail
from topodra.drivers.flags import hostname

EXAMPLES = (
    ("topodra synth --list", "the shipped machines"),
    (
        "topodra synth --spec 2s-8acc-8nic --dest /tmp/hgx",
        "write one; then: topodra inspect --sysfs-root /tmp/hgx",
    ),
    ("topodra synth --spec 64acc-300vf --dest /tmp/big -o json", "the summary as JSON, for scripts"),
    ("topodra synth --spec - --dest /tmp/lab < lab.json", "a spec of your own, from stdin"),
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "synth",
        help="write a synthetic machine's sysfs tree",
        description="Write the sysfs tree of a declared machine: DIR/sys, DIR/proc and "
        "DIR/synth-manifest.json. Point --sysfs-root (or HWLOC_FSROOT) at DIR.",
        epilog=epilog(EXAMPLES, {2: "a flag, the spec or the destination is wrong (one line says which)"}),
    )
    parser.add_argument(
        "--spec", metavar="FILE|NAME", help="a spec JSON file, the name of a shipped spec, or - for stdin"
    )
    parser.add_argument("--dest", "-d", metavar="DIR", type=Path, help="folder to write the tree into")
    add_output_argument(
        parser, ("text", "json", "yaml"), "text", what="the summary (or --list)", moved="--dest DIR"
    )
    parser.add_argument(
        "--hostname", type=hostname, help="override the spec's hostname (seeds MACs, GUIDs, GPU UUIDs)"
    )
    parser.add_argument("--force", action="store_true", help="replace a tree a previous run wrote in DIR")
    parser.add_argument(
        "--dev-nodes",
        action="store_true",
        help="also write DIR/dev: the machine's device nodes as harmless stand-ins (character devices "
        "with /dev/null's numbers; needs root), for running real containers against the tree",
    )
    parser.add_argument("--list", action="store_true", help="list the shipped specs and exit")
    parser.add_argument("--show", action="store_true", help="print the spec's JSON and exit")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from topodra.common.synth import (
        OutputError,
        SpecError,
        build,
        load_spec,
        shipped_spec_names,
        shipped_spec_text,
    )
    from topodra.common.synth.spec import load_spec_text, parse_spec

    if args.list:
        specs = [(name, load_spec(name).description) for name in shipped_spec_names()]
        if args.output == "text":
            for name, description in specs:
                print(f"{name:<16} {description}")
        else:
            sys.stdout.write(dump([{"name": n, "description": d} for n, d in specs], args.output))
        return 0
    if not args.spec:
        return fail("synth", "--spec FILE|NAME is required (see --list)")
    try:
        if args.spec == "-":
            spec = load_spec_text(sys.stdin.read(), default_name="stdin", origin="stdin")
        else:
            spec = load_spec(args.spec)
        if args.show and args.spec != "-":
            text = (
                shipped_spec_text(args.spec)
                if args.spec in shipped_spec_names()
                else Path(args.spec).read_text()
            )
            sys.stdout.write(text)
            return 0
        if not args.dest:
            return fail("synth", "--dest DIR is required: the folder to write the tree into")
        if args.hostname:
            spec = parse_spec({**spec.source, "hostname": args.hostname}, default_name=spec.name)
        result = build(spec, args.dest, force=args.force, dev_nodes=args.dev_nodes)
    except (SpecError, OutputError) as exc:
        print(f"topodra synth: {exc}", file=sys.stderr)
        return 2
    plan = result.plan
    kinds: dict[str, int] = {}
    for f in plan.functions:
        if f.role != "vf":
            kinds[f.kind] = kinds.get(f.kind, 0) + 1
    summary = {
        "name": spec.name,
        "output": str(args.dest),
        "cpus": len(plan.cpus),
        "online_cpus": len(plan.online),
        "packages": spec.cpu.sockets,
        "numa_nodes": len(plan.nodes),
        "accelerators": kinds.get("accelerator", 0),
        "nics": kinds.get("nic", 0),
        "vfs": sum(1 for f in plan.functions if f.role == "vf"),
        "pci_functions": len(plan.functions),
        "uplink": plan.uplink.name if plan.uplink else None,
        "entries": result.entries,
        "seconds": round(result.seconds, 3),
    }
    if args.output == "text":
        print(
            f"wrote {spec.name} to {args.dest}: {summary['cpus']} CPUs in {summary['packages']} package(s) "
            f"and {summary['numa_nodes']} NUMA node(s), {summary['accelerators']} accelerator(s), "
            f"{summary['nics']} NIC(s), {summary['vfs']} VF(s), {summary['pci_functions']} PCI function(s) "
            f"({summary['entries']} entries, {summary['seconds']} s)\n"
            f"  look at it: topodra inspect --sysfs-root {args.dest}"
        )
    else:
        sys.stdout.write(dump(summary, args.output))
    return 0
