#!/usr/bin/env python3
"""Leaf-switch study: what matching pairs on pcieLeafSwitch instead of pcieSwitch buys, and costs,
on machines with nested PCIe switches, on the real scheduler.

Simulated nodes (Node objects, no kubelet) carry the slices the real drivers build for the
shipped synthetic machine 2s-8acc-8nic-pxb: four switch trees, each a top switch over two leaf
switches of one GPU and one NIC. The same seeded job mix (1, 2, 4 or 8 accelerators, one NIC and
4 CPUs each; hack/bench/workload.py) is submitted with the placement study's scenario B claims,
each accelerator-NIC pair matching on pcieSwitch, then with the same claims matching on
pcieLeafSwitch. With `--busy-nics N`, each node first gets N claims of one NIC only (as a
data-loading pod would take), in both scenarios alike, so that some leaves keep a GPU without its
NIC. Printed per scenario: jobs and accelerators placed, pairs on one leaf switch (nvidia-smi
PIX) and pairs only on one switch tree (PXB), with the load average.

Usage: hack/bench/leaf_switch.py [--nodes 4] [--seeds 7,8,9] [--busy-nics 0] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hack.bench import sim  # noqa: E402
from hack.bench.metrics import Placement  # noqa: E402
from hack.bench.workload import ALIGNED, ALIGNED_LEAF, generate  # noqa: E402

SPEC = "2s-8acc-8nic-pxb"
LABELS = {ALIGNED: "pairs on pcieSwitch", ALIGNED_LEAF: "pairs on pcieLeafSwitch"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=4, help="simulated 2s-8acc-8nic-pxb nodes")
    p.add_argument("--seeds", default="7,8,9", help="seeds of the job mix and its order")
    p.add_argument("--oversubscription", type=float, default=1.5, help="job demand / accelerators")
    p.add_argument("--busy-nics", type=int, default=0, help="NIC-only claims per node before the jobs")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def leaves(root: Path) -> dict[str, tuple[str | None, str | None]]:
    """Device name -> (leaf switch, switch) of every PCI function, from the synthetic manifest:
    the leaf from the roles the plan gave the bridges, not from the rule the attribute uses."""
    from topodra.common.pciattrs import device_name
    from topodra.common.synth.manifest import MANIFEST

    pci = json.loads((root / MANIFEST).read_text())["pci"]
    return {device_name(p["bdf"]): (p["pcie_leaf_switch"], p["pcie_switch"]) for p in pci}


def pair_levels(
    placements: list[Placement], where: dict[str, tuple[str | None, str | None]]
) -> dict[str, int]:
    """Accelerator i with NIC i of each job (the claim's pairs): on one leaf switch, on one
    switch tree only, or neither. The allocation lists results in request order (accelerator-i,
    nic-i, cpus-i), which is how the Placement's i-th accelerator and NIC are the i-th pair."""
    out = {"leaf": 0, "switch": 0, "other": 0}
    for p in placements:
        for acc, nic in zip(p.accelerators, p.nics, strict=True):
            (leaf_a, top_a), (leaf_n, top_n) = where[acc.name], where[nic.name]
            if leaf_a is not None and leaf_a == leaf_n:
                out["leaf"] += 1
            elif top_a is not None and top_a == top_n:
                out["switch"] += 1
            else:
                out["other"] += 1
    return out


def take_nics(cp: Any, nodes: list[str], per_node: int, ns: str) -> list[str]:
    """`per_node` claims of one NIC each on every node; the NICs the scheduler gave them."""
    from tests.controlplane.allocation import NIC, submit

    spec = {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": NIC}}]}}
    taken = []
    for node in nodes:
        for i in range(per_node):
            results = submit(cp, ns, node, f"nic-{node}-{i}", spec)
            if results is None:
                raise RuntimeError(f"{node}: no NIC left for NIC-only claim {i}")
            taken += [r["device"] for r in results]
    return taken


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    seeds = [int(x) for x in args.seeds.split(",") if x]
    figures: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-leaf-") as tmp, sim.control_plane() as cp:
        types = [sim.MachineType(f"synth:{SPEC}", args.nodes, "pxb")]
        cluster = sim.build_cluster(cp, types, Path(tmp))
        where = leaves(sim.sysfs_root(f"synth:{SPEC}", Path(tmp)))
        total = sum(len(m.of("accelerator.topodra.io")) for m in cluster.nodes.values())
        load = os.getloadavg()[0]
        print(f"{len(cluster.nodes)} simulated {SPEC} nodes, {total} accelerators, load {load:.2f}")
        previous: list[str] = []
        for seed in seeds:
            jobs = generate(seed, total, oversubscription=args.oversubscription)
            for scenario in (ALIGNED, ALIGNED_LEAF):
                for ns in previous:
                    sim.clear_namespace(cp, ns)
                previous = [f"bench-{scenario}-s{seed}"]
                taken: list[str] = []
                if args.busy_nics:
                    busy = f"bench-{scenario}-s{seed}-nics"
                    previous.append(busy)
                    sim.make_namespace(cp, busy)
                    taken = take_nics(cp, sorted(cluster.nodes), args.busy_nics, busy)
                run = sim.run_scenario(cp, cluster, scenario, jobs, previous[0])
                pairs = pair_levels(run.placements, where)
                placed = sum(p.job.accelerators for p in run.placements)
                row = {
                    "seed": seed,
                    "scenario": scenario,
                    "jobs": len(jobs),
                    "jobs_placed": len(run.placements),
                    "accelerators_placed": placed,
                    "accelerators": total,
                    "busy_nics_per_node": args.busy_nics,
                    "nics_taken": taken,
                    "placed_jobs": [p.job.name for p in run.placements],
                    "allocator_timeouts": run.timed_out,
                    "pairs": pairs,
                    "seconds": round(run.seconds, 1),
                    "load": round(os.getloadavg()[0], 2),
                }
                figures.append(row)
                share = 100 * pairs["leaf"] / max(1, sum(pairs.values()))
                print(
                    f"seed {seed}, {LABELS[scenario]}: {row['jobs_placed']} of {len(jobs)} jobs, "
                    f"{placed} of {total} accelerators placed; pairs on one leaf switch (PIX) "
                    f"{pairs['leaf']} ({share:.0f} %), on one switch tree only (PXB) {pairs['switch']}, "
                    f"other {pairs['other']}; {run.seconds:.0f} s, load {row['load']}",
                    flush=True,
                )
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
