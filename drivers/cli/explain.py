"""`topodra explain`: why a claim fits a node or not, and which locality each pair got.

Takes a claim (`--claim NS/NAME` from the API server, or `--claim-file FILE`: a ResourceClaim,
a ResourceClaimTemplate or a bare claim spec) and a node's ResourceSlices (the API server, or
`--slices FILE`, `-` for stdin, as `kubectl get resourceslices -o yaml` or `topodra slices`
print them). Says per request (and subrequest) how many devices could match and what ruled the
others out, evaluating DeviceClass and request selectors with a CEL library (an expression it
cannot evaluate is named as such), whether the whole claim fits (searched in the scheduler's
order) and, when not, which constraint or request blocks it; for an allocated claim, the
locality level of each accelerator-NIC pair (leaf / switch / root / numa / socket / none; leaf
only where switches are nested).

Exit status: 0 when the claim is allocated or would fit, 1 when it would not fit, 2 when the
input or a flag is wrong (one line says which).
"""

from __future__ import annotations

import argparse
from typing import Any

EXIT_NO_FIT = 1
EXIT_CANNOT = 2
OUTPUTS = ("text", "wide", "json", "yaml")

SUMMARY = "why a claim fits a node or not, and the locality of what it got"
EXAMPLES = (
    (
        "topodra explain --claim ml/train-0-devices",
        "an allocated claim: each pair's locality; a Pending pod's claim on a one-node cluster",
    ),
    ("topodra explain --claim ml/train-0-devices --node worker-3", "a Pending pod's claim on one node"),
    (
        "topodra explain --claim-file deploy/examples/best-locality-2.yaml --slices s.json "
        "--classes deploy/base/deviceclasses.yaml",
        "offline: a template against `topodra slices -o json` output",
    ),
)
EXITS = {
    0: "the claim is allocated or would fit on the node",
    EXIT_NO_FIT: "the claim would not fit (the report names what blocks it)",
    EXIT_CANNOT: "a flag or the input is wrong (one line says)",
}


def register(subparsers: Any) -> None:
    from topodra.drivers import flags
    from topodra.drivers.cli.arguments import add_kubeconfig_argument
    from topodra.drivers.cli.formats import add_output_argument
    from topodra.drivers.cli.usage import command

    p = command(subparsers, "explain", __doc__, help=SUMMARY, examples=EXAMPLES, exits=EXITS)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--claim", type=flags.namespaced_name, metavar="NS/NAME", help="a ResourceClaim on the API server"
    )
    src.add_argument(
        "--claim-file", metavar="FILE", help="a ResourceClaim, ResourceClaimTemplate or claim spec"
    )
    p.add_argument(
        "--node",
        type=flags.node_name,
        default=None,
        metavar="NODE",
        help="the node (default: where the claim is allocated, else the only node with slices)",
    )
    p.add_argument(
        "--slices",
        default=None,
        metavar="FILE",
        help="ResourceSlices from FILE ('-': stdin) instead of the API server",
    )
    p.add_argument(
        "--classes",
        default=None,
        metavar="FILE",
        help="DeviceClasses from FILE (e.g. deploy/base/deviceclasses.yaml) instead of the API server",
    )
    p.add_argument(
        "--in-use",
        default=None,
        metavar="FILE",
        help="allocated ResourceClaims (kubectl get resourceclaims -A -o yaml) whose devices are taken; "
        "default with the API server: every claim allocated on the node; offline: none",
    )
    add_kubeconfig_argument(p, as_kubectl=True)
    add_output_argument(p, OUTPUTS, "text", what="the report")
    p.set_defaults(run=run)


def _fail(message: str) -> int:
    from topodra.drivers.cli.usage import fail

    return fail("explain", message)


def _read(path: str, flag: str, kind: str | None = None) -> list[dict[str, Any]]:
    """The objects of a file (of `kind`, or of no stated kind, when given)."""
    from topodra.common.objectfile import read_objects

    objs = read_objects(path, flag)
    return objs if kind is None else [o for o in objs if o.get("kind") in (kind, None)]


def default_node(nodes: set[str]) -> str:
    """The node to explain a claim that is not allocated on, when --node names none: the only
    node with ResourceSlices (a one-node cluster such as hack/local-up.sh's); else a ValueError
    naming some of them."""
    if len(nodes) == 1:
        return next(iter(nodes))
    if not nodes:
        raise ValueError("no node has ResourceSlices (are the drivers running?)")
    names = sorted(nodes)
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    raise ValueError(f"the claim is not allocated: name the node to explain it on with --node ({shown})")


def run(args: argparse.Namespace) -> int:
    from topodra.common.kubeapi.errors import ApiError
    from topodra.drivers.cli.apiclient import say

    try:
        report, code = _explain(args)
    except ValueError as err:
        return _fail(str(err))
    except ApiError as err:
        return _fail(say(err))
    from topodra.drivers.cli.formats import write_report

    write_report(args.output, lambda: report, lambda wide: text(report, wide=wide))
    return code


def _explain(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    from topodra.common.check.devices import SliceInputError
    from topodra.common.check.watch import list_node_slices, slice_nodes
    from topodra.common.explain import fit, levels
    from topodra.common.explain.inventory import InUse, in_use, node_inventory
    from topodra.common.kubeapi.reads import get_object, list_items

    client = None
    if args.claim is not None or args.slices is None or args.classes is None:
        from topodra.drivers.cli.apiclient import client_as_kubectl

        client = client_as_kubectl(args.kubeconfig)
    if args.claim is not None:
        ns, _, name = args.claim.partition("/")  # checked by flags.namespaced_name
        path = f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}"
        claim_obj = get_object(client, path, f"get ResourceClaim {args.claim}")
    else:
        objs = _read(args.claim_file, "--claim-file")
        claims = [o for o in objs if o.get("kind") in ("ResourceClaim", "ResourceClaimTemplate", None)]
        if len(claims) != 1:
            raise ValueError(f"--claim-file {args.claim_file}: holds {len(claims)} claims; give one")
        claim_obj = claims[0]
    try:
        claim = fit.parse_claim(claim_obj)
        results = fit.allocated(claim_obj)
    except fit.ClaimError as err:
        raise ValueError(f"claim: {err}") from None
    node = args.node
    if node is None and results:
        node = results[0][2]  # our pools are named after their node
    if args.slices is not None:
        slices = _read(args.slices, "--slices", "ResourceSlice")
    else:
        if node is None:
            node = default_node(slice_nodes(client))
        slices = list_node_slices(client, node)
    if args.classes is not None:
        class_objs = _read(args.classes, "--classes", "DeviceClass")
    else:
        class_objs = list_items(client, "/apis/resource.k8s.io/v1/deviceclasses", {}, "list deviceclasses")
    classes = {str((c.get("metadata") or {}).get("name")): c for c in class_objs}
    try:
        node, devices, notes = node_inventory(slices, node)
    except SliceInputError as err:
        raise ValueError(str(err)) from None
    meta = claim_obj.get("metadata") or {}
    me = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
    if args.in_use is not None:
        used = in_use(_read(args.in_use, "--in-use", "ResourceClaim"), node, skip=me)
    elif client is not None:
        # only what is allocated is kept of each page: a cluster's claims need not fit in memory
        path = "/apis/resource.k8s.io/v1/resourceclaims"
        items = list_items(client, path, {}, "list resourceclaims", keep=fit.is_allocated)
        used = in_use(items, node, skip=me)
    else:
        used = InUse()
    report: dict[str, Any] = {"node": node, "notes": notes, "devices": len(devices)}
    if results is not None:
        got = list(fit.iter_results(results, devices))
        report["allocated"] = True
        report["results"] = [{"request": r, "driver": d.driver, "device": d.name} for r, d in got]
        report["pairs"] = [_pair(p) for p in levels.pairs(got)]
        return report, 0
    verdict = fit.explain(claim, devices, classes, used)
    report["allocated"] = False
    report["fits"] = verdict.fits
    report["search_steps"] = verdict.steps
    report["requests"] = [
        {
            "request": c.alternative.name,
            "class": c.alternative.device_class,
            "count": c.alternative.count,
            "could_match": [d.name for d in c.devices],
            "ruled_out": c.ruled_out,
            "not_evaluated": c.not_evaluated,
        }
        for c in verdict.per_alternative
    ]
    report["constraints"] = [c.describe() for c in claim.constraints]
    if verdict.fits:
        report["would_get"] = [
            {"request": r, "driver": d.driver, "device": d.name} for r, d in verdict.assignment
        ]
        report["pairs"] = [_pair(p) for p in levels.pairs(verdict.assignment)]
    else:
        report["blocking"] = verdict.blocking
    return report, 0 if verdict.fits else EXIT_NO_FIT


def _pair(p: Any) -> dict[str, Any]:
    return {"accelerator": p.accelerator, "nic": p.nic, "level": p.level, "recorded": p.recorded}


def text(report: dict[str, Any], wide: bool = False) -> str:
    lines = [f"node {report['node']}: {report['devices']} devices"]
    lines += [f"  note: {n}" for n in report.get("notes", [])]
    if report.get("allocated"):
        lines.append("claim is allocated:")
    else:
        verdict = "would fit" if report.get("fits") else "would NOT fit"
        lines.append(f"claim {verdict} (search: {report.get('search_steps')} steps)")
        for r in report.get("requests", []):
            count = "all" if r["count"] is None else r["count"]
            lines.append(f"  {r['request']} ({r['class']}, {count}): {len(r['could_match'])} could match")
            if wide and r["could_match"]:
                lines.append(f"      {', '.join(r['could_match'])}")
            for reason, n in sorted(r["ruled_out"].items()):
                lines.append(f"      {n} ruled out: {reason}")
            for reason, n in sorted(r["not_evaluated"].items()):
                lines.append(f"      {n} NOT EVALUATED: {reason}")
        for b in report.get("blocking", []):
            lines.append(f"  blocked by {b}")
    for p in report.get("pairs", []):
        rec = f" (claim recorded {p['recorded']})" if p.get("recorded") else ""
        lines.append(f"  {p['accelerator']} + {p['nic'] or '-'}: {p['level']}{rec}")
    return "\n".join(lines) + "\n"
