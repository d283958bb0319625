#!/usr/bin/env python3
"""Benchmark of the claim core (ClaimManager): prepare latency and throughput. Prints figures.

    python hack/bench_claims.py                 # claims served from memory (no GET cost)
    python hack/bench_claims.py --apiserver     # claims GET from a real kube-apiserver on loopback
                                                # (brings up tests/controlplane; needs its binaries)

Each prepare includes the full path: claim GET, checks, the CDI spec writes (temp + rename; not
synced), one checkpoint write (temp file fsync, rename, folder fsync), and the matching
unprepare (one synced checkpoint write, one not) is timed separately
(docs/design/claim-lifecycle.md). System calls per pair: hack/bench/claim_syscalls.py. The driver is a
trivial one (one env edit per device), so the figures are the runtime's own cost.
Targets: p99 <= 5 ms without the GET, <= 10 ms with a real API server; >= 500 claims/s with 64
concurrent claims.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from topodra.common.cdi.edits import ContainerEdits
from topodra.common.device import Device
from topodra.common.kubeapi.errors import NotFound
from topodra.common.runtime.claims import ClaimManager
from topodra.common.runtime.driver import (
    AllocatedDevice,
    ClaimRef,
    OpaqueConfig,
    Preparation,
    PreparedDevice,
    Scan,
)

DRIVER = "bench.topodra.io"
NODE = "bench-node"


class BenchDriver:
    name = DRIVER
    holds_in_memory = True  # prepare touches nothing outside the process

    def __init__(self, n: int) -> None:
        self._devices = tuple(Device(f"dev-{i}") for i in range(n))

    def scan(self) -> Scan:
        return Scan(self._devices)

    def prepare(
        self, claim: ClaimRef, results: Sequence[AllocatedDevice], config: Sequence[OpaqueConfig]
    ) -> Preparation:
        return Preparation(
            devices=tuple(
                PreparedDevice(a.request, a.pool, a.device, ContainerEdits(env=(f"BENCH={a.device}",)))
                for a in results
            )
        )

    def unprepare(self, claim: ClaimRef, preparation: Preparation) -> None:
        pass

    def restore(self, prepared: Mapping[ClaimRef, Preparation]) -> None:
        pass


def claim(ns: str, name: str, uid: str, device: str, driver: str = DRIVER) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": ns, "name": name, "uid": uid},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": driver}}]}},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "r", "driver": driver, "pool": NODE, "device": device}]}
            }
        },
    }


class MemorySource:
    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}

    def put(self, obj: dict[str, Any]) -> ClaimRef:
        m = obj["metadata"]
        self.claims[(m["namespace"], m["name"])] = obj
        return ClaimRef(m["namespace"], m["name"], m["uid"])

    def get(self, namespace: str, name: str, *, cached: bool = False) -> dict[str, Any]:
        try:
            return self.claims[(namespace, name)]
        except KeyError:
            raise NotFound(f"GET ResourceClaim {namespace}/{name}", 404, "not found") from None


@contextlib.contextmanager
def apiserver_store() -> Iterator[tuple[Any, Any]]:
    from kubernetes import client

    from tests.controlplane.cluster import running_control_plane
    from tests.unit.runtime_claims.claimkit import KubeClaimStore

    with running_control_plane() as cp:
        cfg = cp.api_client().configuration
        cfg.connection_pool_maxsize = 64  # as kube_claim_source() sets it
        api = client.ApiClient(cfg)
        ns = f"bench-{uuid.uuid4().hex[:6]}"
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        store = KubeClaimStore(api)
        yield store, ns


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def run(put: Any, source: Any, ns: str, n: int, root: Path, cdi_root: Path) -> dict[str, Any]:
    devices = 64
    figures: dict[str, Any] = {"n": n}
    m = ClaimManager.create(BenchDriver(devices), NODE, source, root / "state", cdi_root)
    m.start()
    refs = [put(claim(ns, f"b{i}", str(uuid.uuid4()), f"dev-{i % devices}")) for i in range(n)]

    gets = []
    for ref in refs[:100]:
        t0 = time.perf_counter()
        source.get(ref.namespace, ref.name)
        gets.append((time.perf_counter() - t0) * 1000)
    print(f"  claim GET alone:            p50 {pct(gets, 50):.2f} ms  p99 {pct(gets, 99):.2f} ms")
    figures["get_ms"] = {"p50": pct(gets, 50), "p99": pct(gets, 99)}
    prep, unprep = [], []
    for ref in refs:
        t0 = time.perf_counter()
        out = m.prepare([ref])[ref.uid]
        t1 = time.perf_counter()
        assert not out.error, out.error
        assert m.unprepare([ref]) == {ref.uid: ""}
        t2 = time.perf_counter()
        prep.append((t1 - t0) * 1000)
        unprep.append((t2 - t1) * 1000)
    print(f"  prepare   one-device claim: p50 {pct(prep, 50):.2f} ms  p99 {pct(prep, 99):.2f} ms  (n={n})")
    print(f"  unprepare one-device claim: p50 {pct(unprep, 50):.2f} ms  p99 {pct(unprep, 99):.2f} ms")
    figures["prepare_ms"] = {"p50": pct(prep, 50), "p99": pct(prep, 99), "mean": statistics.mean(prep)}
    figures["unprepare_ms"] = {"p50": pct(unprep, 50), "p99": pct(unprep, 99)}
    figures["concurrent_claims_per_s"] = []

    batch = refs[:devices]  # 64 concurrent claims, one device each
    for rounds in range(3):
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            outs = list(pool.map(lambda r: m.prepare([r])[r.uid], batch))
        took = time.perf_counter() - t0
        assert all(not o.error for o in outs)
        print(f"  64 concurrent prepares (round {rounds + 1}): {len(batch) / took:.0f} claims/s")
        figures["concurrent_claims_per_s"].append(len(batch) / took)
        m.unprepare(batch)
    t0 = time.perf_counter()
    out = m.prepare(batch)
    took = time.perf_counter() - t0
    assert all(not o.error for o in out.values())
    print(f"  one call with 64 claims: {len(batch) / took:.0f} claims/s")
    figures["one_call_claims_per_s"] = len(batch) / took
    print(f"  (mean single prepare {statistics.mean(prep):.2f} ms)")
    m.unprepare(batch)
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--apiserver", action="store_true", help="GET claims from a real kube-apiserver")
    ap.add_argument("-n", type=int, default=500, help="sequential prepare/unprepare pairs")
    ap.add_argument("--cdi-parent", help="where to make the CDI folder (default: /dev/shm, a tmpfs)")
    ap.add_argument("--json", type=Path, help="also write the figures to this file (machine-readable)")
    args = ap.parse_args()
    # state on disk like /var/lib/..., CDI specs on a tmpfs like /var/run/cdi (when one exists)
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with (
        tempfile.TemporaryDirectory(prefix="bench-claims-") as tmp,
        tempfile.TemporaryDirectory(prefix="bench-cdi-", dir=args.cdi_parent or shm) as cdi,
    ):
        print(f"state dir {tmp}, CDI dir {cdi}")
        if args.apiserver:
            with apiserver_store() as (store, ns):
                print("claim core, claims from a real kube-apiserver on loopback:")
                figures = run(store.put, store.source, ns, args.n, Path(tmp), Path(cdi))
        else:
            src = MemorySource()
            print("claim core, claims from memory (no GET cost):")
            figures = run(src.put, src, "bench", args.n, Path(tmp), Path(cdi))
    if args.json:
        figures["apiserver"] = args.apiserver
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
