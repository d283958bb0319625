#!/usr/bin/env python3
"""Benchmark: the claim GET of the prepare path (keepalive.Getter), this checkout against another
revision's, interleaved in one process against one real kube-apiserver (not a test).

    python3 hack/bench/claim_get.py [--against REV] [-n 300] [--rounds 6]

Brings up the control plane of tests/controlplane, creates -n allocated claims, and GETs them
all with the cpu driver's node-bound ServiceAccount token, as a driver does on prepare: once with
this checkout's `topodra.common.kubeapi.keepalive` and once with REV's (`git show
REV:common/kubeapi/keepalive.py`, loaded as a second module beside it), alternating which goes
first in every round. Prints, per implementation, the process CPU per GET (user+sys of this
process over a round, divided by its GETs: the API server runs in its own processes), the
thread CPU per GET, and p50/p99 of one GET over all rounds, then the ratios, with the 1-minute
load average. Figures are printed, never asserted. Needs the control-plane binaries
(hack/controlplane/build.sh).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import types
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from topodra.common.kubeapi import keepalive  # noqa: E402
from topodra.common.kubeapi.claims import claim_path  # noqa: E402

NODE = "bench-get-node"
DRIVER = "cpu.topodra.io"
DEFAULT_AGAINST = "06f8e35"  # main before the claim GET stopped using http.client


def module_at(rev: str) -> types.ModuleType:
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:common/kubeapi/keepalive.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType(f"keepalive_at_{rev}")
    module.__file__ = f"{rev}:common/kubeapi/keepalive.py"
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def one_round(getter: Any, paths: list[str], lat: list[float]) -> tuple[float, float]:
    """(process CPU s, thread CPU s) of GETting every path once."""
    c0, t0 = time.process_time(), time.thread_time()
    for path in paths:
        s = time.perf_counter()
        resp = getter.get(path, 10.0)
        lat.append(time.perf_counter() - s)
        if resp.status != 200:
            raise SystemExit(f"GET {path}: {resp.status} {resp.data[:200]!r}")
    return time.process_time() - c0, time.thread_time() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", default=DEFAULT_AGAINST, help="the revision compared (default %(default)s)")
    ap.add_argument("-n", type=int, default=300, help="claims, each GET once per round")
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()

    from tests.controlplane.cluster import running_control_plane
    from tests.kit.claims import Result, claim_object, create_allocated

    impls = {"this checkout": keepalive, f"at {args.against}": module_at(args.against)}
    with running_control_plane() as cp:
        admin = cp.api_client()
        ns = f"bench-get-{uuid.uuid4().hex[:6]}"
        from kubernetes import client

        client.CoreV1Api(admin).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        cp.create_node(NODE)
        for i in range(args.n):
            results = [Result("dev", f"cpu-{i % 64}", pool=NODE, driver=DRIVER)]
            create_allocated(admin, claim_object(ns, f"c{i}", "", results, device_class=DRIVER, node=NODE))
        cfg = cp.driver_client("cpu", NODE).configuration
        paths = [claim_path(ns, f"c{i}") for i in range(args.n)]
        getters = {name: mod.Getter(cfg) for name, mod in impls.items()}
        first = {name: g.get(paths[0], 10.0).data for name, g in getters.items()}
        if len(set(first.values())) != 1:
            raise SystemExit("the two implementations read different bodies")
        print(f"{args.n} claims of {len(first[next(iter(first))])} bytes, {args.rounds} rounds, token auth")
        for g in getters.values():  # warm-up: a connection each, the code paths run once
            one_round(g, paths[:50], [])
        cpu: dict[str, list[float]] = {name: [] for name in getters}
        thread: dict[str, list[float]] = {name: [] for name in getters}
        lat: dict[str, list[float]] = {name: [] for name in getters}
        loads = []
        for r in range(args.rounds):
            order = list(getters) if r % 2 == 0 else list(reversed(getters))
            for name in order:
                p, t = one_round(getters[name], paths, lat[name])
                cpu[name].append(p / args.n)
                thread[name].append(t / args.n)
            loads.append(os.getloadavg()[0])
        print(f"load average (1 min) over the rounds: {min(loads):.2f}-{max(loads):.2f}")
        for name in getters:
            print(
                f"  {name:16s} CPU/GET process {statistics.median(cpu[name]) * 1e6:6.0f} us"
                f"  thread {statistics.median(thread[name]) * 1e6:6.0f} us"
                f"  latency p50 {pct(lat[name], 50) * 1e3:.3f} ms  p99 {pct(lat[name], 99) * 1e3:.3f} ms"
            )
        new, old = list(getters)
        cpu_ratio = statistics.median(cpu[new]) / statistics.median(cpu[old])
        p50, p99 = (pct(lat[new], p) / pct(lat[old], p) for p in (50, 99))
        print(f"  ratio this/{args.against}: CPU {cpu_ratio:.2f}x  p50 {p50:.2f}x  p99 {p99:.2f}x")
        for g in getters.values():
            g.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
