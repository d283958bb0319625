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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claim_core_cpu import REPO, alternate, report, run_code

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hold", type=int, default=1000, help="claims prepared and held")
    ap.add_argument("--runs", type=int, default=3, help="fresh processes per side")
    ap.add_argument("--against", metavar="REV", help="also run this commit's claim core, interleaved")
    args = ap.parse_args()
    code = CHILD.format(hack=str(REPO / "hack"), hold=args.hold)
    seen, _ = alternate(args.against, args.runs, lambda path: run_code(path, code))
    print(f"claim core memory per claim held ({args.hold} held, tracemalloc), {args.runs} runs per side")
    report(seen, args.against, "bytes", 0)


if __name__ == "__main__":
    main()
