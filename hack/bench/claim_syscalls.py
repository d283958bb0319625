#!/usr/bin/env python3
"""System calls per prepare + unprepare of one claim in the claim core, counted by strace.

    python3 hack/bench/claim_syscalls.py [-n 200]

Runs the claim core (hack/bench_claims.py's trivial driver, claims from memory, state in a temp
folder, CDI specs in /dev/shm like /var/run/cdi) under `strace -f -c` twice, with n and 2n
prepare/unprepare pairs, and prints the difference per pair for each system call, so that the
start-up's own calls cancel out. A count, not a timing: what the call path asks of the kernel
(fsyncs, failing mkdirs, stats) does not depend on the machine's load. Needs strace.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import random, sys, tempfile, uuid
from pathlib import Path
sys.path.insert(0, {repo!r})
sys.path.insert(0, {hack!r})
import bench_claims as b
from topodra.common.runtime.claims import ClaimManager
n = int(sys.argv[1])
with tempfile.TemporaryDirectory(prefix="sc-") as tmp, tempfile.TemporaryDirectory(
    prefix="sc-cdi-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None
) as cdi:
    src = b.MemorySource()
    m = ClaimManager.create(b.BenchDriver(64), b.NODE, src, Path(tmp) / "state", Path(cdi))
    m.start()
    rng = random.Random(n)  # not uuid4: its getrandom would count as the claim core's
    uids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n)]
    refs = [src.put(b.claim("bench", f"b{{i}}", u, f"dev-{{i % 64}}")) for i, u in enumerate(uids)]
    for r in refs:
        assert not m.prepare([r])[r.uid].error
        assert m.unprepare([r]) == {{r.uid: ""}}
"""


def counts(n: int, script: Path, out: Path) -> dict[str, tuple[int, int]]:
    """syscall -> (calls, errors) of one run with n pairs."""
    subprocess.run(
        ["strace", "-f", "-c", "-o", str(out), sys.executable, str(script), str(n)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    found: dict[str, tuple[int, int]] = {}
    for line in out.read_text().splitlines():
        parts = line.split()
        if len(parts) in (5, 6) and parts[0][0].isdigit() and parts[-1].isidentifier():
            found[parts[-1]] = (int(parts[3]), int(parts[4]) if len(parts) == 6 else 0)
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=200, help="prepare/unprepare pairs in the shorter run")
    args = ap.parse_args()
    if shutil.which("strace") is None:
        print("strace is not installed (apt-get install strace)")
        return 1
    with tempfile.TemporaryDirectory(prefix="claim-syscalls-") as tmp:
        script = Path(tmp) / "pairs.py"
        script.write_text(CHILD.format(repo=str(REPO), hack=str(REPO / "hack")))
        short = counts(args.n, script, Path(tmp) / "short.txt")
        long = counts(2 * args.n, script, Path(tmp) / "long.txt")
    per: dict[str, tuple[float, float]] = {}
    for name in set(short) | set(long):
        (c1, e1), (c2, e2) = short.get(name, (0, 0)), long.get(name, (0, 0))
        per[name] = ((c2 - c1) / args.n, (e2 - e1) / args.n)
    total = per.pop("total", (0.0, 0.0))
    print(f"system calls per prepare + unprepare of one claim (n={args.n} pairs, strace -f -c):")
    for name, (calls, errors) in sorted(per.items(), key=lambda kv: -kv[1][0]):
        if calls >= 0.05:
            failing = f"  ({errors:.1f} failing)" if errors >= 0.05 else ""
            print(f"  {name:<16} {calls:6.1f}{failing}")
    print(f"  {'total':<16} {total[0]:6.1f}  ({total[1]:.1f} failing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
