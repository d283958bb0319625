#!/usr/bin/env python3
"""Benchmark: API server reads per hour per node of the reconcile loop (not a test).

A driver re-reads every claim it holds prepared, about once a minute, to unprepare the ones that
were deleted or moved while it was not told (a missed NodeUnprepareResources). On a large cluster
that is nodes x claims GETs an hour against the API server, and a GET that is not served from its
watch cache is also a read of etcd (a quorum read). This counts them.

What runs is the real thing: the ClaimManager's own reconcile loop (`start_reconciler`, with its
default interval and jitter), the real KubeClaimSource, the real kube-apiserver and etcd of the
control-plane tier (tests/controlplane; binaries from hack/controlplane/build.sh). Between the
source and the API server sits a loopback HTTP proxy that forwards every request and counts it:
a GET with `resourceVersion=0` may be answered from the watch cache, any other GET is a quorum
read. Only the loop's clock is simulated: its waits (`_stop.wait`) advance a virtual clock
instead of sleeping, so one simulated hour takes the time of its requests. N claims are created
and allocated to the node through the status subresource, then prepared, before the hour starts
(prepare's own reads are not counted).

Per N, three arms, one after the other on the same claims:
- "steady": nothing changes for the hour;
- "one deleted": one claim is deleted at minute 30 (the reads that confirm a deletion are
  quorum reads, and it is unprepared after two rounds that see it gone);
- "all quorum (before 51983b1)": the same steady hour with every GET a quorum read, what the
  loop did before it read the watch cache.

Usage: hack/bench/reconcile.py [--claims 10,100] [--hours 1] [--out docs/bench/reconcile-reads.md]
Prints the figures and the load average; writes them as a short markdown page with --out.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hack.bench.prepare_plugin import BenchDriver  # noqa: E402  (exclusive devices, no side effects)

NODE = "reconcile-node"
DRIVER = "reconcile.bench.topodra.io"


HEADER = """\
# Reconcile reads per hour per node

`hack/bench/reconcile.py`: the ClaimManager's own reconcile loop (every 60 s +- 20 %, the
production defaults) holding N prepared claims, against the real kube-apiserver and etcd of the
control-plane tier, through a loopback proxy that counts every request. The loop's waits run on
a simulated clock, so an hour of rounds takes the time of its requests (`wall s`). A GET with
`resourceVersion=0` may be answered from the API server's watch cache; every other GET is a
quorum read, i.e. also a read of etcd. Per node and driver; a cluster's total is nodes x drivers
x this. "all quorum" is the same loop reading as it did before 51983b1.
"""


# --- the counting proxy ----------------------------------------------------------------------


class CountingProxy(ThreadingHTTPServer):
    """Forwards every request to the API server and counts it by kind."""

    daemon_threads = True

    def __init__(self, api: Any) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.api = api
        self.lock = threading.Lock()
        self.cached = 0  # GET with resourceVersion=0: the watch cache may answer
        self.quorum = 0  # any other GET: read from etcd
        self.other = 0  # anything but GET (reconcile should make none)
        self.statuses: dict[int, int] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def reset(self) -> None:
        with self.lock:
            self.cached = self.quorum = self.other = 0
            self.statuses = {}


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: CountingProxy

    def do_GET(self) -> None:
        from topodra.common.kubeapi import rest

        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query))
        got = rest.request(self.server.api, "GET", url.path, query=query, timeout=30)
        with self.server.lock:
            if query.get("resourceVersion") == "0":
                self.server.cached += 1
            else:
                self.server.quorum += 1
            self.server.statuses[got.status] = self.server.statuses.get(got.status, 0) + 1
        self._answer(got.status, got.headers.get("Content-Type", "application/json"), got.data)

    def _refuse(self) -> None:
        with self.server.lock:
            self.server.other += 1
        self._answer(405, "text/plain", b"not forwarded by the bench proxy\n")

    do_POST = do_PUT = do_PATCH = do_DELETE = _refuse

    def _answer(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def counting_proxy(api: Any) -> Iterator[CountingProxy]:
    srv = CountingProxy(api)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


# --- the loop's clock ------------------------------------------------------------------------


class VirtualStop:
    """Stands in for the loop's stop Event: each wait advances a virtual clock by its timeout
    and returns at once; at `end` it says stop. `events` run when the clock passes their time."""

    def __init__(self, end: float, events: Sequence[tuple[float, Any]] = ()) -> None:
        self.now = 0.0
        self.end = end
        self.waits: list[float] = []
        self._events = sorted(events, key=lambda e: e[0])
        self._done = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        if self._done.is_set() or timeout is None:
            return True
        self.now += timeout
        self.waits.append(timeout)
        while self._events and self._events[0][0] <= self.now:
            self._events.pop(0)[1]()
        if self.now >= self.end:
            self._done.set()
            return True
        return False

    def set(self) -> None:
        self._done.set()

    def is_set(self) -> bool:
        return self._done.is_set()


# --- the driver and the claims ---------------------------------------------------------------


class QuorumOnly:
    """The real source with every read a quorum read (the loop before it read the watch cache)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def get(self, namespace: str, name: str, *, cached: bool = False) -> Any:
        return self.inner.get(namespace, name)


def make_claims(api: Any, namespace: str, n: int) -> list[Any]:
    from kubernetes import client
    from topodra.common.runtime.driver import ClaimRef

    objects = client.CustomObjectsApi(api)
    group = ("resource.k8s.io", "v1")
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    refs = []
    for i in range(n):
        name = f"claim-{i}"
        spec = {
            "devices": {"requests": [{"name": "req", "exactly": {"deviceClassName": "bench.topodra.io"}}]}
        }
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}}
        made: Any = objects.create_namespaced_custom_object(
            *group, namespace, "resourceclaims", body | {"spec": spec}
        )
        made["status"] = {
            "allocation": {
                "devices": {
                    "results": [{"request": "req", "driver": DRIVER, "pool": NODE, "device": f"dev-{i}"}]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
                    ]
                },
            }
        }
        objects.replace_namespaced_custom_object_status(*group, namespace, "resourceclaims", name, made)
        refs.append(ClaimRef(namespace, name, made["metadata"]["uid"]))
    return refs


def delete_claim(api: Any, namespace: str, name: str) -> None:
    from kubernetes import client

    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "resource.k8s.io", "v1", namespace, "resourceclaims", name
    )


# --- one arm ---------------------------------------------------------------------------------


@dataclass
class Arm:
    claims: int
    name: str
    seconds: float  # simulated
    rounds: int = 0
    cached: int = 0
    quorum: int = 0
    other: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    unprepared: int = 0
    wall_s: float = 0.0

    def per_hour(self, count: int) -> float:
        return count * 3600.0 / self.seconds


def run_arm(
    api: Any,
    proxy: CountingProxy,
    n: int,
    name: str,
    seconds: float,
    *,
    quorum_only: bool,
    delete_at: float | None,
) -> Arm:
    from kubernetes import client
    from topodra.common.kubeapi.claims import KubeClaimSource
    from topodra.common.runtime.claims import ClaimManager

    namespace = f"reconcile-{uuid.uuid4().hex[:8]}"
    refs = make_claims(api, namespace, n)
    cfg = client.Configuration(host=proxy.url)
    cfg.retries = 0
    source: Any = KubeClaimSource(client.ApiClient(cfg), timeout=30)
    if quorum_only:
        source = QuorumOnly(source)
    arm = Arm(n, name, seconds)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-reconcile-", dir="/tmp") as tmp:
            m = ClaimManager.create(BenchDriver(DRIVER), NODE, source, Path(tmp) / "state", Path(tmp) / "cdi")
            m.start()
            for i in range(0, n, 64):
                failed = [o.error for o in m.prepare(refs[i : i + 64]).values() if o.error]
                if failed:
                    raise SystemExit(f"reconcile bench: prepare failed: {failed[0]}")
            events = (
                [] if delete_at is None else [(delete_at, lambda: delete_claim(api, namespace, refs[0].name))]
            )
            clock = VirtualStop(seconds, events)
            m._stop = clock  # type: ignore[assignment]  # the loop's only clock: its waits
            rounds = 0
            real = m.reconcile

            def counted() -> Any:
                nonlocal rounds
                rounds += 1
                return real()

            m.reconcile = counted  # type: ignore[method-assign]
            proxy.reset()
            t0 = time.perf_counter()
            m.start_reconciler()  # the production defaults: every 60 s +- 20 %
            assert m._reconciler is not None
            m._reconciler.join()
            arm.wall_s = time.perf_counter() - t0
            arm.rounds = rounds
            arm.unprepared = n - len(m.prepared())
            with proxy.lock:
                arm.cached, arm.quorum, arm.other = proxy.cached, proxy.quorum, proxy.other
                arm.statuses = dict(proxy.statuses)
            m.close()
    finally:
        client.CoreV1Api(api).delete_namespace(namespace)
    return arm


def table(arms: Sequence[Arm], load: tuple[tuple[float, ...], tuple[float, ...]]) -> str:
    lines = [
        "| claims held | arm | rounds | GETs/hour | from watch cache (rv=0) | quorum reads | other requests "
        "| unprepared | wall s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for a in arms:
        lines.append(
            f"| {a.claims} | {a.name} | {a.rounds} | {a.per_hour(a.cached + a.quorum):.0f} | "
            f"{a.per_hour(a.cached):.0f} | {a.per_hour(a.quorum):.0f} | {a.per_hour(a.other):.0f} | "
            f"{a.unprepared} | {a.wall_s:.1f} |"
        )
    lines.append("")
    lines.append(
        "load average at start / end: "
        + " / ".join(" ".join(f"{x:.2f}" for x in la) for la in load)
        + f"; {os.cpu_count()} CPUs shared with other work"
    )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--claims", default="10,100", help="comma-separated claim counts held on the node")
    p.add_argument("--hours", type=float, default=1.0, help="simulated hours per arm")
    p.add_argument("--out", type=Path, help="write the table (markdown) here")
    args = p.parse_args()
    from tests.controlplane.cluster import running_control_plane

    counts = [int(x) for x in args.claims.split(",") if x]
    seconds = args.hours * 3600
    start = os.getloadavg()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in start)}", flush=True)
    arms: list[Arm] = []
    with running_control_plane() as cp:
        api = cp.api_client()
        with counting_proxy(api) as proxy:
            for n in counts:
                for name, quorum_only, delete_at in (
                    ("steady", False, None),
                    ("one deleted at minute 30", False, seconds / 2),
                    ("all quorum (before 51983b1)", True, None),
                ):
                    arm = run_arm(api, proxy, n, name, seconds, quorum_only=quorum_only, delete_at=delete_at)
                    arms.append(arm)
                    print(
                        f"{n} claims, {name}: {arm.rounds} rounds in {seconds / 3600:g} simulated h, "
                        f"{arm.per_hour(arm.cached + arm.quorum):.0f} GETs/h, "
                        f"{arm.per_hour(arm.cached):.0f} from the watch cache, "
                        f"{arm.per_hour(arm.quorum):.0f} quorum, {arm.other} other requests, "
                        f"statuses {arm.statuses}, {arm.unprepared} unprepared, {arm.wall_s:.1f} s wall",
                        flush=True,
                    )
    end = os.getloadavg()
    out = table(arms, (start, end))
    print(out)
    if args.out:
        args.out.write_text(HEADER + "\n" + out + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
