#!/usr/bin/env python3
"""Where `topodra serve cpu`'s resident memory comes from, step by step. Prints figures.

    python3 hack/bench/serve_rss.py [--tries 3] [--wait 35]

One real kube-apiserver and etcd (tests/controlplane; needs hack/controlplane/build.sh's
binaries) and `topodra serve cpu` as hack/bench-peer runs it (in-cluster, the synthetic 256-CPU
tree, core devices, no pinning, deploy/base's environment), started `--tries` times afresh. The
Go kubelet client (hack/bench/kubelet) drives it through bench-peer's warm-up: 20 prepares one at
a time, one round of 64 in flight, 150 one at a time (where bench-peer reads the RSS row), then
nothing for `--wait` seconds (idle gRPC workers beyond 8 end after 30 s). After each step:
resident memory, threads, what of it is in file mappings and elsewhere, the process's TCP
connections (the claim GET's kept connections); after the first try, the file mappings by
resident size (shared libraries and extension modules: which imports cost what). Not a test:
nothing is asserted.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack" / "bench"))


def smaps(pid: int) -> list[tuple[str, int]]:
    """(mapped file or [anon]/[heap]/[stack], resident KiB) per mapping."""
    out: list[tuple[str, int]] = []
    name = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and not fields[0].endswith(":"):
            name = fields[5] if len(fields) > 5 else "[anon]"
        elif fields and fields[0] == "Rss:":
            out.append((name, int(fields[1])))
    return out


def step(pid: int, what: str) -> None:
    import psutil

    proc = psutil.Process(pid)
    maps = smaps(pid)
    anon = sum(kib for name, kib in maps if not name.startswith("/")) / 1024
    files = sum(kib for name, kib in maps if name.startswith("/")) / 1024
    tcp = len(proc.net_connections(kind="tcp"))
    print(
        f"  {what:<44} RSS {proc.memory_info().rss / 2**20:5.1f} MiB  threads {proc.num_threads():3d}"
        f"  in file mappings {files:5.1f} MiB, elsewhere {anon:5.1f} MiB  TCP connections {tcp}",
        flush=True,
    )


def by_file(pid: int, top: int = 15) -> None:
    sizes: dict[str, int] = collections.defaultdict(int)
    for name, kib in smaps(pid):
        if name.startswith("/"):
            sizes[name] += kib
    print("  file mappings by resident size:")
    for name, kib in sorted(sizes.items(), key=lambda kv: -kv[1])[:top]:
        print(f"    {kib / 1024:5.2f} MiB  {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tries", type=int, default=3, help="fresh processes, one after another")
    ap.add_argument("--wait", type=float, default=35.0, help="idle seconds after the warm-up")
    args = ap.parse_args()

    from serve_against import bench_peer, serve_cpu_world

    from tests.controlplane.cluster import running_control_plane

    bp = bench_peer()
    client = bp.build("hack/bench/kubelet/build.sh")
    with tempfile.TemporaryDirectory(prefix="serve-rss-") as tmp, running_control_plane() as cp:
        kubeconfig, sysfs, claims, token = serve_cpu_world(bp, cp, Path(tmp), 150)
        env = dict(os.environ) | bp.driver_env("cpu")
        print(f"load average at start: {os.getloadavg()[0]:.2f}")
        with bp.service_account_mount_point(True) as in_cluster:
            for t in range(args.tries):
                print(f"try {t + 1}:")
                starter = {
                    "topodra": lambda root: bp.start_topodra_serve(
                        root, kubeconfig, sysfs, env, token if in_cluster else None
                    )
                }
                with bp.plugins(starter) as running:
                    p = running["topodra"]
                    time.sleep(1.0)
                    step(p.pid, "serving")
                    bp.kubelet_phase(client, p, claims[:20], "latency", latency=20, warmup=0)
                    step(p.pid, "after 20 prepares one at a time")
                    bp.kubelet_phase(client, p, claims[:64], "rounds", rounds=1)
                    step(p.pid, "after a round of 64 in flight")
                    bp.kubelet_phase(client, p, claims[:150], "latency", latency=150, warmup=10)
                    step(p.pid, "after 150 more one at a time (bench-peer)")
                    time.sleep(args.wait)
                    step(p.pid, f"after {args.wait:.0f} s idle")
                    if t == 0:
                        by_file(p.pid)
        print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
