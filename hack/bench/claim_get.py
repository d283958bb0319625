#!/usr/bin/env python3
"""Benchmark: the claim GET of the prepare path (keepalive.Getter), this checkout against another
revision's, interleaved in one process against one real kube-apiserver (not a test).

    python3 hack/bench/claim_get.py [--against REV] [-n 300] [--rounds 6]
    python3 hack/bench/claim_get.py --server-cost [-n 300] [--rounds 10] [--threads 16]

Brings up the control plane of tests/controlplane, creates -n allocated claims, and GETs them
all with the cpu driver's node-bound ServiceAccount token, as a driver does on prepare: once with
this checkout's `topodra.common.kubeapi.keepalive` and once with REV's (`git show
REV:common/kubeapi/keepalive.py`, loaded as a second module beside it), alternating which goes
first in every round. Prints, per implementation, the process CPU per GET (user+sys of this
process over a round, divided by its GETs: the API server runs in its own processes), the
thread CPU per GET, and p50/p99 of one GET over all rounds, then the ratios, with the 1-minute
load average. Figures are printed, never asserted. Needs the control-plane binaries
(hack/controlplane/build.sh).

--server-cost asks what a GET costs the other side: this checkout's Getter asking for JSON (as
the driver does) against the same Getter asking for the API server's protobuf encoding (as
client-go's generated clientsets do for built-in types), alternating, --threads GETs in flight;
per GET, the CPU of the kube-apiserver and etcd processes (from /proc, clock ticks: each round
GETs every claim 8 times so that a tick is small against it) and of this process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
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


class _ProtobufGetter(keepalive.Getter):
    """The same request with the API server's protobuf encoding asked for instead of JSON."""

    def _fields(self, fresh: bool) -> bytes:
        fields = super()._fields(fresh)
        json_field = b"Accept: application/json\r\n"
        if json_field not in fields:  # else this side would ask for JSON too, and say nothing
            raise SystemExit("keepalive.Getter no longer sends 'Accept: application/json'")
        return fields.replace(json_field, b"Accept: application/vnd.kubernetes.protobuf\r\n")


def threaded_round(getter: Any, paths: list[str], threads: int) -> None:
    def work(share: list[str]) -> None:
        for path in share:
            resp = getter.get(path, 10.0)
            if resp.status != 200:
                raise SystemExit(f"GET {path}: {resp.status} {resp.data[:200]!r}")

    pool = [threading.Thread(target=work, args=(paths[i::threads],)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


def server_cost(cp: Any, getters: dict[str, Any], paths: list[str], rounds: int, threads: int) -> None:
    import psutil

    procs = {name: psutil.Process(pid) for name, pid in cp.server_pids().items()}
    per_round = paths * 8
    cpu: dict[str, dict[str, list[float]]] = {g: {p: [] for p in [*procs, "this process"]} for g in getters}
    loads = []
    for g in getters.values():  # warm-up
        threaded_round(g, paths, threads)
    for r in range(rounds):
        for name in list(getters) if r % 2 == 0 else list(reversed(getters)):
            before = {p: sum(proc.cpu_times()[:2]) for p, proc in procs.items()}
            own = time.process_time()
            threaded_round(getters[name], per_round, threads)
            own = time.process_time() - own
            for p, proc in procs.items():
                cpu[name][p].append((sum(proc.cpu_times()[:2]) - before[p]) / len(per_round))
            cpu[name]["this process"].append(own / len(per_round))
        loads.append(os.getloadavg()[0])
    load = f"{min(loads):.2f}-{max(loads):.2f}"
    print(f"{len(per_round)} GETs a round, {threads} in flight; load average (1 min): {load}")
    for name in getters:
        cells = (
            f"{p} {statistics.median(v) * 1e6:4.0f} us [{min(v) * 1e6:.0f}-{max(v) * 1e6:.0f}]"
            for p, v in cpu[name].items()
        )
        print(f"  {name:9s} CPU per GET (median [min-max] of {rounds}): " + ", ".join(cells))
    first, second = list(getters)
    for p in cpu[first]:
        ratio = statistics.median(cpu[second][p]) / statistics.median(cpu[first][p])
        print(f"  {p}: {second}/{first} {ratio:.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", default=DEFAULT_AGAINST, help="the revision compared (default %(default)s)")
    ap.add_argument("-n", type=int, default=300, help="claims, each GET once per round")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--server-cost", action="store_true", help="server CPU per GET: JSON vs protobuf")
    ap.add_argument("--threads", type=int, default=16, help="GETs in flight with --server-cost")
    args = ap.parse_args()

    from tests.controlplane.cluster import running_control_plane
    from tests.kit.claims import Result, claim_object, create_allocated

    impls = {"this checkout": keepalive}
    if not args.server_cost:
        impls[f"at {args.against}"] = module_at(args.against)
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
        if args.server_cost:
            encodings = {"JSON": keepalive.Getter(cfg), "protobuf": _ProtobufGetter(cfg)}
            for name, g in encodings.items():
                resp = g.get(paths[0], 10.0)
                print(f"{name}: {len(resp.data)} bytes, Content-Type {resp.headers.get('Content-Type')}")
            server_cost(cp, encodings, paths, args.rounds, args.threads)
            return 0
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
