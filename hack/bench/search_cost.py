#!/usr/bin/env python3
"""How much of the upstream allocator's search each claim shape costs, fitting and not fitting.

Runs hack/bench/allocator (the structured allocator of kube-scheduler 1.37.2, built from the
same Go modules as the control plane) on the slices the real drivers build for the study's
machines, after some earlier claims took devices, and prints per case: whether the claim fits,
the allocator's own count of search steps (allocateOne calls), the time and whether the
scheduler's default 10 s Filter timeout was hit. docs/design/prioritized-placement.md quotes it.

Usage: hack/bench/search_cost.py [--timeout 10] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hack.bench import fallback, sim  # noqa: E402
from hack.bench.workload import Job, aligned_spec, count_only_spec  # noqa: E402

NODE = "node-0"
CLASSES = [
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": c},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{c}"'}}]},
    }
    for c in (fallback.ACCELERATOR_CLASS, fallback.NIC_CLASS, fallback.CPU_CLASS)
]


def claim(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "bench"}, "spec": spec}


def run(binary: str, slices: list[dict[str, Any]], claims: list[dict[str, Any]], timeout: float) -> Any:
    body = {
        "node": NODE,
        "slices": slices,
        "classes": CLASSES,
        "claims": claims,
        "timeout_s": timeout,
        "keep": True,
    }
    done = subprocess.run([binary], input=json.dumps(body), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"allocator-steps: {done.stderr.strip()}")
    return json.loads(done.stdout)


def shapes(k: int) -> dict[str, dict[str, Any]]:
    job = Job(0, k)
    out = {"A count-only": count_only_spec(job), "B strict pairs": aligned_spec(job)}
    if k <= fallback.PAIR_LIMIT:
        out["C best locality (pairs)"] = fallback.pair_spec(k)
    else:
        out["C best locality (group)"] = fallback.group_spec(k)
        out["pairs, if used for this size"] = _pairs_unbounded(k)
    return out


def _pairs_unbounded(k: int) -> dict[str, Any]:
    """The pair form beyond PAIR_LIMIT (not shipped), to show why: built pair by pair."""
    one = fallback.pair_spec(1)["devices"]
    requests: list[dict[str, Any]] = []
    constraints: list[dict[str, Any]] = []
    for i in range(k):
        rename = {"accelerator-0": f"accelerator-{i}", "nic-0": f"nic-{i}", "cpus-0": f"cpus-{i}"}
        for r in one["requests"]:
            requests.append({**r, "name": rename[r["name"]]})
        for c in one["constraints"]:
            names = [rename[n.split("/")[0]] + "/" + n.split("/")[1] for n in c["requests"]]
            constraints.append({**c, "requests": names})
    if len(constraints) > 32:  # the API's limit: keep the level constraints, drop ties past it
        constraints = constraints[:32]
    return {"devices": {"requests": requests, "constraints": constraints}}


CASES = (
    # (machine, jobs taken before, size of the claim measured)
    ("synth:2s-8acc-8nic", (), 4),
    ("synth:2s-8acc-8nic", (1, 1, 1, 1, 1), 4),
    ("synth:2s-8acc-8nic", (), 8),
    ("synth:2s-8acc-8nic", (1,), 8),
    ("synth:2s-8acc-8nic", (1, 1, 1, 1, 1, 1, 1), 2),
    (f"captured:{sim.CAPTURED_8ACC}", (), 4),
    (f"captured:{sim.CAPTURED_8ACC}", (1,), 4),
    (f"captured:{sim.CAPTURED_8ACC}", (), 8),
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timeout", type=float, default=10.0, help="the scheduler's Filter timeout, seconds")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    binary = subprocess.run(
        [str(REPO / "hack" / "bench" / "allocator" / "build.sh")], capture_output=True, text=True, check=True
    ).stdout.strip()
    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        for kind, before, k in CASES:
            root = sim.sysfs_root(kind, Path(tmp))
            slices = sim.node_slices(NODE, "uid", sim.driver_devices(root))
            for shape, spec in shapes(k).items():
                taken = [claim(f"before-{i}", fallback.best_locality_spec(n)) for i, n in enumerate(before)]
                out = run(binary, slices, [*taken, claim("measured", spec)], args.timeout)
                r = out["claims"][-1]
                rows.append(
                    {
                        "machine": kind.split(":", 1)[1],
                        "taken": sum(before),
                        "k": k,
                        "shape": shape,
                        "fits": r["allocated"],
                        "steps": r["steps"],
                        "seconds": r["seconds"],
                        "timed_out": r["timed_out"],
                        "allocator": out["allocator"],
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    load_after = os.getloadavg()
    print()
    print("| machine | accelerators taken | job | claim | fits | search steps | time | hit timeout |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        verdict = "yes" if r["fits"] else ("gave up" if r["timed_out"] else "no room")
        print(
            f"| {r['machine']} | {r['taken']} | {r['k']} | {r['shape']} | {verdict} | {r['steps']} "
            f"| {1000 * r['seconds']:.0f} ms | {'yes' if r['timed_out'] else 'no'} |"
        )
    print(f"\nload average {load_before[0]:.2f} before, {load_after[0]:.2f} after, {os.cpu_count()} CPUs")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "load": [load_before, load_after]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
