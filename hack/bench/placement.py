#!/usr/bin/env python3
"""Placement study: the same seeded job mix on the real scheduler with three kinds of claims.

Simulated nodes (Node objects, no kubelet) carry the slices the real drivers build for three
machine types: the synthetic 2s-8acc-8nic training node, its SNC-2 variant, and a captured
8-accelerator machine. Scenario A submits count-only claims, B claims that put each accelerator
with a NIC on its PCIe switch and its CPUs on their NUMA node, C the shipped best-locality claims
that fall back level by level (workload.py, fallback.py). D is a churn phase on a filled
cluster (jobs finish at random, new ones arrive) for A, B and C, recording stranded accelerators.
Prints a markdown table and writes it, PNG charts and the raw figures (JSON) to --out.

Usage: hack/bench/placement.py [--seeds 7,8,9] [--nodes 6,6,4] [--churn-events 240] [--out docs/bench]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hack.bench import chart, report, sim  # noqa: E402
from hack.bench.metrics import (  # noqa: E402
    CostModel,
    percentile,
    summarize,
)
from hack.bench.workload import ALIGNED, BEST, COUNT_ONLY, SCENARIOS, Job, generate  # noqa: E402

LABELS = {
    COUNT_ONLY: "A: count-only",
    ALIGNED: "B: matchAttribute (switch + NUMA)",
    BEST: "C: best locality, fall back",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--seeds",
        default="7,8,9",
        help="seeds of the job mix and its order; the first gives the main table, all the repeat table",
    )
    p.add_argument(
        "--nodes",
        default="6,6,4",
        help="how many nodes of each type: 2s-8acc-8nic, 2s-8acc-8nic-snc2, captured 8-accelerator",
    )
    p.add_argument("--oversubscription", type=float, default=1.5, help="job demand / accelerators")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "bench", help="folder for .md/.png/.json")
    p.add_argument("--json", type=Path, default=None, help="also write the raw figures here")
    p.add_argument("--churn-events", type=int, default=240, help="events of the churn phase (0: none)")
    p.add_argument("--verbose", action="store_true")
    return p.parse_args(argv)


def machine_types(spec: str) -> list[sim.MachineType]:
    counts = [int(x) for x in spec.split(",")]
    if len(counts) != 3 or any(c < 0 for c in counts) or sum(counts) == 0:
        raise SystemExit(f"--nodes wants three non-negative counts, got {spec!r}")
    kinds = (
        ("synth:2s-8acc-8nic", "hgx"),
        ("synth:2s-8acc-8nic-snc2", "hgx-snc2"),
        (f"captured:{sim.CAPTURED_8ACC}", "captured-8ve"),
    )
    return [sim.MachineType(k, c, short) for (k, short), c in zip(kinds, counts, strict=True) if c]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    model = CostModel()
    began = time.monotonic()
    load_before = os.getloadavg()
    seeds = [int(x) for x in args.seeds.split(",") if x]
    if not seeds:
        raise SystemExit("--seeds wants at least one seed")
    repeats: list[dict[str, Any]] = []  # per seed: both scenarios' figures
    with tempfile.TemporaryDirectory(prefix="bench-placement-") as tmp, sim.control_plane() as cp:
        cluster = sim.build_cluster(cp, machine_types(args.nodes), Path(tmp))
        total = sum(len(m.of("accelerator.topodra.io")) for m in cluster.nodes.values())
        print(f"{len(cluster.nodes)} simulated nodes, {total} accelerators, {cluster.slices_created} slices")
        previous: str | None = None
        for seed in seeds:
            jobs = generate(seed, total, oversubscription=args.oversubscription)
            per_seed: dict[str, Any] = {"seed": seed, "jobs": len(jobs), "results": []}
            for scenario in SCENARIOS:
                if previous is not None:
                    sim.clear_namespace(cp, previous)
                previous = f"bench-{scenario}-s{seed}"
                run = sim.run_scenario(cp, cluster, scenario, jobs, previous)
                r = summarize(scenario, jobs, run.submitted, run.placements, cluster.nodes, run.timing, model)
                r["seconds"] = run.seconds
                r["skipped"] = run.skipped
                r["allocator_timeouts"] = run.timed_out
                r["latency_s"] = {"bound": sorted(run.timing.bound.values())}
                per_seed["results"].append(r)
                print(
                    f"seed {seed}, {LABELS[scenario]}: {r['jobs_placed']} of {len(jobs)} jobs placed, "
                    f"{r['accelerators_placed']} accelerators, {run.seconds:.0f} s",
                    flush=True,
                )
            repeats.append(per_seed)
        churn: dict[str, Any] = {}
        if args.churn_events > 0:
            fill = generate(seeds[0], total, oversubscription=args.oversubscription)
            arrivals = [  # a second mix, named apart from the fill's jobs
                Job(1000 + j.index, j.accelerators, j.cpus_per_accelerator)
                for j in generate(seeds[0] + 1000, total, oversubscription=4.0)
            ]
            for scenario in SCENARIOS:
                if previous is not None:
                    sim.clear_namespace(cp, previous)
                previous = f"churn-{scenario}"
                c = sim.run_churn(
                    cp, cluster, scenario, fill, arrivals, previous, seed=seeds[0], events=args.churn_events
                )
                churn[scenario] = {
                    "timeline": c.timeline,
                    "arrivals": c.arrivals,
                    "rejected": c.rejected,
                    "seconds": c.seconds,
                }
                print(
                    f"churn {LABELS[scenario]}: {c.arrivals} arrivals, {c.rejected} found no room, "
                    f"stranded at the end {c.timeline[-1][4]}, {c.seconds:.0f} s",
                    flush=True,
                )
        machines = dict(sim.machines_summary(cluster))
    load_after = os.getloadavg()
    wall = time.monotonic() - began
    results: list[dict[str, Any]] = repeats[0]["results"]
    meta = {
        "seed": seeds[0],
        "seeds": seeds,
        "nodes": machines,
        "jobs": repeats[0]["jobs"],
        "oversubscription": args.oversubscription,
        "wall_seconds": wall,
        "load_before": load_before,
        "load_after": load_after,
        "cpus": os.cpu_count(),
        "churn_events": args.churn_events,
        "accelerators": total,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    labels = [LABELS[r["scenario"]] for r in results]
    md = document(results, labels, meta, model, repeats, churn)
    (args.out / "placement.md").write_text(md)
    (args.out / "placement.png").write_bytes(chart.placement_chart(results, labels))
    if churn:
        (args.out / "placement-churn.png").write_bytes(chart.churn_chart(churn, LABELS, total))
    raw = (
        json.dumps(
            {"meta": meta, "results": results, "repeats": repeats, "churn": churn}, indent=2, sort_keys=True
        )
        + "\n"
    )
    (args.out / "placement.json").write_text(raw)
    if args.json:
        args.json.write_text(raw)
    print(md)
    return 0


def goals(repeats: list[dict[str, Any]]) -> list[str]:
    """The issue's goals for C, reported (never asserted), from every seed."""
    lines = []
    by = [{r["scenario"]: r for r in rep["results"]} for rep in repeats]
    if not by or BEST not in by[0] or COUNT_ONLY not in by[0]:
        return lines
    placed = all(
        b[BEST]["jobs_placed"] >= b[COUNT_ONLY]["jobs_placed"]
        and b[BEST]["accelerators_placed"] >= b[COUNT_ONLY]["accelerators_placed"]
        for b in by
    )
    cells = ", ".join(
        f"seed {rep['seed']}: {b[BEST]['jobs_placed']} vs {b[COUNT_ONLY]['jobs_placed']} jobs, "
        f"{b[BEST]['accelerators_placed']} vs {b[COUNT_ONLY]['accelerators_placed']} accelerators"
        for rep, b in zip(repeats, by, strict=True)
    )
    lines.append(
        f"- C places at least as many jobs and accelerators as A on every seed: {_met(placed)} ({cells})."
    )
    pairs = sum(b[BEST]["pairs"] for b in by)
    switch = sum(round((b[BEST]["aligned_switch"] or 0) * b[BEST]["pairs"]) for b in by)
    share = switch / pairs if pairs else 0.0
    lines.append(
        f"- At least 90 % of C's accelerator-NIC pairs share a PCIe switch: {_met(share >= 0.9)} "
        f"({switch} of {pairs}, {100 * share:.0f} %, all seeds)."
    )
    avoidable = sum(b[BEST].get("avoidable_cross_socket", 0) for b in by)
    cross = sum(b[BEST]["pairs_cross_socket"] for b in by)
    lines.append(
        f"- No C pair crosses sockets where the node had a same-socket choice: {_met(avoidable == 0)} "
        f"({cross} pairs cross sockets, {avoidable} of them avoidable)."
    )
    pooled: dict[str, list[float]] = {}
    for rep in repeats:
        for r in rep["results"]:
            pooled.setdefault(r["scenario"], []).extend(r.get("latency_s", {}).get("bound", []))
    a99, c99 = percentile(pooled.get(COUNT_ONLY, []), 0.99), percentile(pooled.get(BEST, []), 0.99)
    if a99 and c99:
        lines.append(
            f"- C's scheduling p99 within 2x of A's: {_met(c99 <= 2 * a99)} (pod create -> nodeName, "
            f"pooled: C {1000 * c99:.0f} ms, A {1000 * a99:.0f} ms, {c99 / a99:.2f}x)."
        )
    return lines


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def churn_table(churn: dict[str, Any], total: int) -> str:
    if not churn:
        return "(no churn phase in this run)"
    arms = [s for s in SCENARIOS if s in churn]
    events = max(t[0] for s in arms for t in churn[s]["timeline"])
    marks = sorted({0, events, *range(0, events + 1, max(1, events // 6))})
    head = "| after event | " + " | ".join(f"{LABELS[s]}: placed / free / stranded" for s in arms) + " |"
    lines = [head, "|---|" + "---|" * len(arms)]
    for m in marks:
        cells = []
        for s in arms:
            row = [t for t in churn[s]["timeline"] if t[0] <= m][-1]
            cells.append(f"{row[2]} / {row[3]} / {row[4]}")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    summary = []
    for s in arms:
        tl = churn[s]["timeline"][1:] or churn[s]["timeline"]
        mean = sum(t[4] for t in tl) / len(tl)
        summary.append(
            f"{LABELS[s]}: {churn[s]['arrivals']} arrivals, {churn[s]['rejected']} found no room, "
            f"stranded {mean:.1f} accelerators on average ({100 * mean / total:.0f} % of {total})"
        )
    return "\n".join([*lines, "", "; ".join(summary) + "."])


def which_claim(results: list[dict[str, Any]], churn: dict[str, Any]) -> str:
    by = {r["scenario"]: r for r in results}
    if len(by) < 3:
        return ""

    def row(s: str, claim: str, when: str) -> str:
        r = by[s]
        stranded = "-"
        if s in churn:
            tl = churn[s]["timeline"][1:] or churn[s]["timeline"]
            stranded = f"{sum(t[4] for t in tl) / len(tl):.1f}"
        return (
            f"| {claim} | {r['jobs_placed']} | {r['accelerators_placed']} | {pct(r['aligned_switch'])} "
            f"| {r['pairs_cross_socket']} | {stranded} | {r['bound_p99_ms']:.0f} ms | {when} |"
        )

    return "\n".join(
        [
            "| claim | jobs placed | accelerators | pairs on one switch | pairs crossing sockets "
            "| stranded in churn (mean) | nodeName p99 | use it when |",
            "|---|---|---|---|---|---|---|---|",
            row(
                BEST,
                "best-locality-{1,2,4,8}",
                "by default: locality where the node has it, as many accelerators as count-only",
            ),
            row(
                COUNT_ONLY, "baseline-count-only", "locality does not matter (no NIC traffic, CPU-bound jobs)"
            ),
            row(
                ALIGNED,
                "pcieswitch-aligned / numa-aligned",
                "a job is worthless without the aligned path (GPUDirect RDMA required) and may wait",
            ),
        ]
    )


def pct(v: Any) -> str:
    return "n/a" if v is None else f"{100 * float(v):.0f} %"


def document(
    results: list[dict[str, Any]],
    labels: list[str],
    meta: dict[str, Any],
    model: CostModel,
    repeats: list[dict[str, Any]],
    churn: dict[str, Any] | None = None,
) -> str:
    churn = churn or {}
    nodes = ", ".join(f"{n} x {k}" for k, n in meta["nodes"].items())
    return "\n".join(
        [
            "# Placement study: count-only, strict and best-locality claims",
            "",
            f"Real kube-scheduler (1.37) on {sum(meta['nodes'].values())} simulated nodes: {nodes}. "
            "Node objects only, no kubelet; each node's ResourceSlices were built by the real "
            "drivers' device builders and the publisher's slice builder from the machine's sysfs tree "
            "and created by the admin (no driver processes run).",
            f"{meta['jobs']} jobs (1, 2, 4 or 8 accelerators, as many NICs, 4 CPUs per accelerator; "
            f"seed {meta['seed']}, demand {meta['oversubscription']}x the accelerators), submitted one "
            "at a time in the same order in every scenario until nothing more fits.",
            "",
            report.table(results, labels),
            "",
            "![placement chart](placement.png)",
            "",
            "## Goals for C (reported, not asserted)",
            "",
            *goals(repeats),
            "",
            "## Which claim should I use",
            "",
            which_claim(results, churn),
            "",
            "Figures from the table above (seed {}) and the churn phase below.".format(meta["seed"]),
            "",
            f"Other seeds on the same cluster (fresh namespaces; seed {meta['seed']} is the table above):",
            "",
            report.repeat_table(repeats),
            "",
            f"## D: churn ({meta.get('churn_events', 0)} events on the filled cluster)",
            "",
            "Each arm first fills the cluster with the seed's jobs as above, then at each event a running "
            "job chosen at random finishes (its claim deleted) or, with the same probability, the next job "
            "of a second seeded mix arrives (deleted at once when it finds no room). Stranded: free "
            "accelerators on nodes where not even a 1-accelerator job of that arm's claim fits.",
            "",
            churn_table(churn, int(meta.get("accelerators", 128))),
            "",
            "![churn chart](placement-churn.png)" if churn else "",
            "",
            "How to read it:",
            "- A asks for k accelerators, k NICs and 4k CPUs (deploy/examples/baseline-count-only.yaml "
            "scaled to k). B asks for k (accelerator, NIC, 4 CPUs) triples; each triple's accelerator "
            "and NIC match on `topology.topodra.io/pcieSwitch` and its CPUs match both on "
            "`resource.kubernetes.io/numaNode`. C is deploy/examples/best-locality-k.yaml: pairs that fall "
            "back switch, root, NUMA, socket, any for 1 and 2 accelerators, a group with rails levels "
            "beyond (docs/design/prioritized-placement.md).",
            "- Jobs are scored by their best accelerator-NIC pairing (A's and C's groups do not say which "
            "NIC serves which accelerator); levels nest (switch within root within NUMA node within "
            "socket). Every switch on these machines hangs off a root complex of its own, so the switch "
            "and root rows coincide. 'Recorded' levels are the subrequests C's allocations name.",
            "- 'Where the node had free same-socket pairs': replaying the placements in order, a job's "
            "cross-socket pairs beyond what the node's free devices forced just before it.",
            "- The captured machine has 4 accelerators and one InfiniBand NIC per switch (two switches) and "
            "its two Ethernet ports on a third switch without accelerators, all on one socket.",
            "- Stranded (main table): free devices no pending job could take, per node, offering every "
            "pending job to every node (a lower bound). 'Aligned jobs' uses B's rules, 'count-only "
            "jobs' A's.",
            "- Latency: from just before the pod's create call to the watch event showing "
            "`spec.nodeName` (or the claim's allocation, or the scheduler's 'cannot allocate all "
            "claims'), one job in flight at a time.",
            "- Jobs whose scheduling the allocator gave up on (its filter timeout) are listed as such and "
            "not taken as proof of no room.",
            "- The scheduler breaks ties between equally good nodes at random, so counts move by a job or "
            "two between runs of the same seed.",
            "- Once a job of size k found no room, later jobs of size >= k are not submitted (devices are "
            "only taken, so they cannot fit either); the run ends when a 1-accelerator job finds no room.",
            f"- {report.model_text(model)}",
            "",
            f"Run: {meta['wall_seconds']:.0f} s wall clock including control-plane start, on "
            f"{meta['cpus']} CPUs shared with other work; load average {meta['load_before'][0]:.2f} before, "
            f"{meta['load_after'][0]:.2f} after.",
            "",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
