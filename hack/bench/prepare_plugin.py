#!/usr/bin/env python3
"""The bench plugin process of hack/bench-prepare and hack/bench-peer (not a test): the real
DriverService (ClaimManager with its checkpoint and CDI writer, Plugin, gRPC servers) around
BenchDriver, a driver with N exclusive devices and no hardware side effects, so that what the
process costs is the runtime's own.

Its own file, importing nothing of the harness that starts it (statistics, tempfile, the
kubelet client, ...): the benchmarks compare this process's RSS with a Go plugin's, and the
harness's modules are no part of a driver. The claim helpers live here because both sides use
them: the harness creates the claims this process serves.

    python hack/bench/prepare_plugin.py --root DIR --drivers NAME[,NAME] [--claims N]
                                        [--kubeconfig FILE] [--plane-only]
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

NODE = "bench-node"
NAMESPACE = "bench"
DEVICES = 4096

API_UIDS: dict[int, str] = {}  # the API server assigns UIDs; filled when claims live there


def claim_uid(driver: str, i: int) -> str:
    uid = API_UIDS.get(i)
    if uid is None:
        import uuid  # the plugin process never needs it with claims from the API server

        uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{driver}/{i}"))
    return uid


def claim_name(i: int) -> str:
    return f"claim-{i}"


def claim_spec(driver: str) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "req", "exactly": {"deviceClassName": "bench.topodra.io"}}]}}


def allocation(driver: str, i: int) -> dict[str, Any]:
    return {
        "devices": {
            "results": [{"request": "req", "driver": driver, "pool": NODE, "device": f"dev-{i % DEVICES}"}]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
            ]
        },
    }


def claim_object(driver: str, i: int, uid: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": NAMESPACE, "name": claim_name(i), "uid": uid or claim_uid(driver, i)},
        "spec": claim_spec(driver),
        "status": {"allocation": allocation(driver, i)},
    }


# ---------------------------------------------------------------------------------------------
# child: the plugin process


class BenchDriver:
    """N exclusive devices; prepare returns one env edit per device and touches nothing."""

    holds_in_memory = True  # so the claim core writes no started mark (drivers/cpu does the same)

    def __init__(self, name: str) -> None:
        from topodra.common.device import Device

        self.name = name
        self._devices = tuple(Device(name=f"dev-{i}") for i in range(DEVICES))

    def scan(self) -> Any:
        from topodra.common.runtime.driver import Scan

        return Scan(self._devices)

    def prepare(self, claim: Any, results: Sequence[Any], config: Sequence[Any]) -> Any:
        from topodra.common.cdi.edits import ContainerEdits
        from topodra.common.runtime.driver import Preparation, PreparedDevice

        return Preparation(
            devices=tuple(
                PreparedDevice(r.request, r.pool, r.device, ContainerEdits(env=(f"BENCH_DEVICE={r.device}",)))
                for r in results
            )
        )

    def unprepare(self, claim: Any, preparation: Any) -> None:
        pass

    def restore(self, prepared: Mapping[Any, Any]) -> None:
        pass


class MemorySource:
    def __init__(self, driver: str, n: int) -> None:
        self._claims = {(NAMESPACE, claim_name(i)): claim_object(driver, i) for i in range(n)}

    def get(self, namespace: str, name: str, *, cached: bool = False) -> dict[str, Any]:
        from topodra.common.kubeapi.errors import NotFound

        try:
            return copy.deepcopy(self._claims[(namespace, name)])
        except KeyError:
            raise NotFound(f"GET ResourceClaim {namespace}/{name}", 404, "not found") from None


class MemoryProcessor:
    """ClaimProcessor answering from a table: isolates the gRPC plane's own cost."""

    def __init__(self, driver: str) -> None:
        from topodra.common.runtime.seams import ClaimOutcome, ResultDevice

        self._outcome = ClaimOutcome(devices=(ResultDevice(("req",), NODE, "dev-0", (f"{driver}/claim=x",)),))

    def prepare(self, claims: Sequence[Any]) -> dict[str, Any]:
        return {c.uid: self._outcome for c in claims}

    def unprepare(self, claims: Sequence[Any]) -> dict[str, str]:
        return {c.uid: "" for c in claims}


def serve(args: argparse.Namespace) -> int:
    from topodra.common import logs
    from topodra.common.runtime.plugin import Plugin, PluginOptions, serve_all, settle_heap
    from topodra.common.runtime.service import DriverService

    logs.setup("ERROR")  # refused claims are expected in the three-driver RSS run
    root = Path(args.root)

    def started() -> None:
        if not os.environ.get("BENCH_NO_SETTLE"):  # A/B only
            settle_heap()  # as `topodra serve` does
        (root / "started").write_text(str(os.getpid()))

    if args.plane_only:
        options = PluginOptions(kubelet_root=root, node_name=NODE)
        plugins = [Plugin(BenchDriver(n), MemoryProcessor(n), options) for n in args.drivers.split(",")]
        serve_all(plugins, on_started=started)
        return 0
    api = None
    if args.kubeconfig:
        from topodra.common.kubeapi import loader

        api = loader.new_api_client(args.kubeconfig)  # as `topodra serve` makes it
    services = []
    for name in args.drivers.split(","):
        if api is not None:
            from topodra.common.kubeapi.claims import KubeClaimSource

            source: Any = KubeClaimSource(api)
        else:
            source = MemorySource(name, args.claims)
        services.append(
            DriverService.create(
                BenchDriver(name),
                source,
                PluginOptions(kubelet_root=root, node_name=NODE),
                cdi_root=Path(args.cdi_root) if args.cdi_root else root / "cdi",
                state_dir=root / "state",
            )
        )
    serve_all(services, on_started=started)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--root", required=True, help="kubelet root, CDI and state folders")
    p.add_argument("--drivers", required=True, help="driver names, comma-separated")
    p.add_argument("--claims", type=int, default=0, help="claims served from memory (without --kubeconfig)")
    p.add_argument("--cdi-root", help="CDI folder (default: <root>/cdi); a node's /var/run/cdi is a tmpfs")
    p.add_argument("--kubeconfig", help="GET the claims from this API server, as `topodra serve` does")
    p.add_argument("--plane-only", action="store_true", help="answer from a table (the gRPC plane alone)")
    return serve(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
