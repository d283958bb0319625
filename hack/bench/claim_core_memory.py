#!/usr/bin/env python3
"""Memory the claim core keeps per claim held, in process. Prints figures.

    python3 hack/bench/claim_core_memory.py [--hold 1000] [--runs 3] [--against REV]

Each run is a fresh interpreter that makes a ClaimManager with hack/bench_claims.py's trivial
driver (claims from memory; state in a temp folder, CDI specs in /dev/shm like /var/run/cdi),
then prepares `hold` claims, 64 per call, and prints what `tracemalloc` sees allocated and still
live afterwards, divided by `hold`: the records, their checkpoint encodings, the index of held
devices. Python's own allocations only (not the allocator's slack, which RSS also shows), so the
figure is the same run after run and tells two revisions apart where RSS cannot.

`--against REV` also runs the claim core of another commit (exported as claim_core_cpu.py does),
alternating the two, and prints their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claim_core_cpu import REPO, export

CHILD = """
import gc, sys, tempfile, tracemalloc, uuid
from pathlib import Path
sys.path.insert(0, {hack!r})
import bench_claims as b
from topodra.common.runtime.claims import ClaimManager
hold = {hold}
cdi_parent = "/dev/shm" if Path("/dev/shm").is_dir() else None
with tempfile.TemporaryDirectory(prefix="cm-") as tmp, \\
        tempfile.TemporaryDirectory(prefix="cm-cdi-", dir=cdi_parent) as cdi:
    src = b.MemorySource()
    m = ClaimManager.create(b.BenchDriver(hold), b.NODE, src, Path(tmp) / "state", Path(cdi))
    m.start()
    refs = [src.put(b.claim("bench", f"h{{i}}", str(uuid.uuid4()), f"dev-{{i}}")) for i in range(hold)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for i in range(0, hold, 64):
        assert not any(o.error for o in m.prepare(refs[i : i + 64]).values())
    gc.collect()
    after = tracemalloc.take_snapshot()
    print(sum(d.size_diff for d in after.compare_to(before, "filename")) / hold)
"""


def run(path: Path | None, hold: int) -> float:
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(path), env.get("PYTHONPATH"))))
    code = CHILD.format(hack=str(REPO / "hack"), hold=hold)
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hold", type=int, default=1000, help="claims prepared and held")
    ap.add_argument("--runs", type=int, default=3, help="fresh processes per side")
    ap.add_argument("--against", metavar="REV", help="also run this commit's claim core, interleaved")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cm-rev-") as tmp:
        sides: dict[str, Path | None] = {"this tree": None}
        if args.against:
            sides = {args.against: export(args.against, Path(tmp)), "this tree": None}
        seen: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(args.runs):
            for name, path in sides.items():
                seen[name].append(run(path, args.hold))
    print(f"claim core memory per claim held ({args.hold} held, tracemalloc), {args.runs} runs per side")
    for name, values in seen.items():
        each = " ".join(f"{v:.0f}" for v in values)
        print(f"  {name:>12}: median {statistics.median(values):.0f} bytes  ({each})")
    if args.against:
        ratio = statistics.median(seen["this tree"]) / statistics.median(seen[args.against])
        print(f"  this tree / {args.against}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
