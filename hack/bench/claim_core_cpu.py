#!/usr/bin/env python3
"""CPU the claim core spends per prepare + unprepare of one claim, in process. Prints figures.

    python3 hack/bench/claim_core_cpu.py [--batch 64] [--rounds 30] [--runs 5] [--hold 0]
                                         [--driver bench|cpu] [--against REV]

Each run is a fresh interpreter that makes a ClaimManager with hack/bench_claims.py's trivial
driver, or with `--driver cpu` the CPU driver as `topodra serve cpu --cpu-device-granularity core
--cpu-pinning none` runs it on the synthetic 256cpu tree (what bench-peer's `serve cpu` rows use),
claims from memory (no GET cost; state in a temp folder, CDI specs in /dev/shm like
/var/run/cdi), warms up, then times `time.process_time()` over `rounds` prepares and unprepares of
`batch` claims per call (64 is what the kubelet's calls add up to under load, 1 a call at a time),
with `hold` other claims prepared and kept meanwhile, and prints the CPU per claim pair. No gRPC,
no API server: the claim core's own cost, including its system calls (the spec writes, the
checkpoint writes and fsyncs).

`--against REV` also runs the claim core of another commit (its `common/`, `drivers/` and `proto/`
exported with `git archive`, imported in place of this tree's), alternating the two run by run,
and prints the median of each and their ratio with the load average: on a shared machine only a
ratio measured in the same run, interleaved, means anything.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import sys, tempfile, time, uuid
from pathlib import Path
sys.path.insert(0, {hack!r})
import bench_claims as b
from topodra.common.runtime.claims import ClaimManager
batch_size, rounds, hold, which = {batch}, {rounds}, {hold}, {driver!r}
cdi_parent = "/dev/shm" if Path("/dev/shm").is_dir() else None
with tempfile.TemporaryDirectory(prefix="cc-") as tmp, \\
        tempfile.TemporaryDirectory(prefix="cc-cdi-", dir=cdi_parent) as cdi:
    if which == "cpu":
        from topodra.common.synth import build, load_spec
        from topodra.common.topology import discover
        from topodra.drivers.cpu.driver import CpuDriver
        from topodra.drivers.cpu.options import CpuOptions
        build(load_spec("256cpu"), Path(tmp) / "sys")
        driver = CpuDriver(
            discover(Path(tmp) / "sys"), CpuOptions(granularity="core", pinning="none"), Path(tmp) / "sys"
        )
        devices = [d.name for d in driver.scan().devices]
        if len(devices) < 64 + hold:
            sys.exit(f"the 256cpu tree has {{len(devices)}} core devices: at most {{len(devices) - 64}} held")
    else:
        driver = b.BenchDriver(64 + hold)
        devices = [f"dev-{{i}}" for i in range(64 + hold)]
    src = b.MemorySource()
    m = ClaimManager.create(driver, b.NODE, src, Path(tmp) / "state", Path(cdi))
    m.start()
    def claim(name, device):
        return src.put(b.claim("bench", name, str(uuid.uuid4()), device, driver.name))
    refs = [claim(f"b{{i}}", devices[i]) for i in range(64)]
    batches = [refs[i : i + batch_size] for i in range(0, 64, batch_size)]
    kept = [claim(f"h{{i}}", devices[64 + i]) for i in range(hold)]
    for i in range(0, hold, 64):
        assert not any(o.error for o in m.prepare(kept[i : i + 64]).values())
    def cycle():
        for one in batches:
            assert not any(o.error for o in m.prepare(one).values())
            assert not any(m.unprepare(one).values())
    for _ in range(3):
        cycle()
    t0 = time.process_time()
    for _ in range(rounds):
        cycle()
    print((time.process_time() - t0) / rounds / 64 * 1000)
"""


def export(rev: str, into: Path) -> Path:
    """A folder to put first on PYTHONPATH so that `topodra.*` is `rev`'s code."""
    tree = into / "tree"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    shim = into / "shim" / "topodra"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("")
    for part in ("common", "drivers", "proto"):
        (shim / part).symlink_to(tree / part)
    return shim.parent


def run_code(path: Path | None, code: str) -> float:
    """`code` in a fresh interpreter, with `path` (from `export`) first on PYTHONPATH: its figure."""
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(path), env.get("PYTHONPATH"))))
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


def alternate(
    against: str | None, runs: int, one: Callable[[Path | None], float]
) -> tuple[dict[str, list[float]], list[float]]:
    """`one` run by run for this tree and, with `against`, that commit's claim core in turn: the
    figures of each side and the load average after each pair of runs."""
    with tempfile.TemporaryDirectory(prefix="cc-rev-") as tmp:
        sides: dict[str, Path | None] = {"this tree": None}
        if against:
            sides = {against: export(against, Path(tmp)), "this tree": None}
        seen: dict[str, list[float]] = {name: [] for name in sides}
        loads = []
        for _ in range(runs):
            for name, path in sides.items():
                seen[name].append(one(path))
            loads.append(os.getloadavg()[0])
    return seen, loads


def report(seen: dict[str, list[float]], against: str | None, unit: str, digits: int) -> None:
    for name, values in seen.items():
        each = " ".join(f"{v:.{digits}f}" for v in values)
        print(f"  {name:>12}: median {statistics.median(values):.{digits}f} {unit}  ({each})")
    if against:
        ratio = statistics.median(seen["this tree"]) / statistics.median(seen[against])
        print(f"  this tree / {against}: {ratio:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64, help="claims per prepare/unprepare call (divides 64)")
    ap.add_argument("--rounds", type=int, default=30, help="timed rounds of 64 claims per run")
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per side")
    ap.add_argument("--hold", type=int, default=0, help="claims prepared first and kept during the runs")
    ap.add_argument(
        "--driver", choices=("bench", "cpu"), default="bench", help="the trivial driver or the CPU driver"
    )
    ap.add_argument("--against", metavar="REV", help="also run this commit's claim core, interleaved")
    args = ap.parse_args()
    if 64 % args.batch:
        ap.error("--batch must divide 64")
    code = CHILD.format(
        hack=str(REPO / "hack"), batch=args.batch, rounds=args.rounds, hold=args.hold, driver=args.driver
    )
    seen, loads = alternate(args.against, args.runs, lambda path: run_code(path, code))
    print(
        f"claim core CPU per prepare+unprepare, {args.driver} driver, {args.batch} claims per call, "
        f"{args.hold} claims held, {args.runs} runs per side"
    )
    report(seen, args.against, "ms", 3)
    print(f"  load average (1 min) during the runs: {min(loads):.2f}-{max(loads):.2f}")


if __name__ == "__main__":
    main()
