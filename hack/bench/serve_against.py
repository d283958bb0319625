#!/usr/bin/env python3
"""`topodra serve cpu` of this tree against the same of other commits, side by side. Prints figures.

    python3 hack/bench/serve_against.py --against REV [--against REV2] [--reps 8]

One real kube-apiserver and etcd (the control-plane tier: tests/controlplane; needs
hack/controlplane/build.sh's binaries), one `topodra serve cpu` per side, configured in-cluster
as the DaemonSet runs it (hack/bench-peer's set-up: a synthetic 256-CPU sysfs, core devices, no
pinning), each side's `common/`, `drivers/` and `proto/` from `git archive REV` first on its
PYTHONPATH. The Go kubelet client (hack/bench/kubelet) drives them phase by phase, in turn,
rotating who goes first:

- one call at a time: 256 prepares, each unprepared right after; the plugin's CPU per pair and
  the prepare's p50;
- 64 in flight: 10 rounds of 64 claims from nothing held; the plugin's CPU per pair and the
  median claims per second of the rounds.

The sides run at the same time but only one is called at once: the machine's speed, which moves
by 2x between minutes here, moves every side's figures alike. The medians over `--reps` and
each side's ratio to the first `--against` are printed with the load average. Not a test:
nothing is asserted.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from importlib.machinery import SourceFileLoader
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack" / "bench"))

from claim_core_cpu import export  # noqa: E402

LATENCY_CALLS = 256
ROUNDS = 10
MEASURES = (
    "one at a time: CPU per pair (ms)",
    "one at a time: p50 (ms)",
    "64 in flight: CPU per pair (ms)",
    "64 in flight: claims/s",
)


def bench_peer() -> Any:
    """hack/bench-peer as a module: its control-plane, plugin and kubelet-client helpers."""
    spec = importlib.util.spec_from_loader(
        "bench_peer", SourceFileLoader("bench_peer", str(REPO / "hack" / "bench-peer"))
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_peer"] = module
    spec.loader.exec_module(module)
    return module


def serve_cpu_world(
    bp: Any, cp: Any, tmp: Path, n: int
) -> tuple[Path, Path, list[Any], tuple[str, str, Path]]:
    """What bench-peer's `serve cpu` rows run on, made in control plane `cp`: its namespace and
    node, the synthetic 256-CPU sysfs under `tmp`, `n` allocated claims, and the driver's
    node-bound token: (kubeconfig, sysfs, claims, (API server, token, CA file))."""
    import kubernetes.client as k8s
    from topodra.common.synth import build, load_spec

    k8s.CoreV1Api(cp.api_client()).create_namespace({"metadata": {"name": bp.NAMESPACE}})
    cp.create_node(bp.NODE)
    kubeconfig = cp.driver_kubeconfig("cpu", bp.NODE)
    sysfs = tmp / "sys"
    build(load_spec(bp.SYNTH_CPU), sysfs)
    claims = bp.create_claims(cp, bp.CPU_DRIVER, bp.serve_cpu_devices(sysfs), n, "c")
    return kubeconfig, sysfs, claims, (cp.server, cp.driver_token("cpu", bp.NODE), cp.ca_file)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--against",
        action="append",
        required=True,
        metavar="REV",
        help="a commit to compare with (repeatable)",
    )
    ap.add_argument("--reps", type=int, default=8, help="phases of each kind per side")
    args = ap.parse_args()

    from tests.controlplane.cluster import running_control_plane

    bp = bench_peer()
    client = bp.build("hack/bench/kubelet/build.sh")
    with tempfile.TemporaryDirectory(prefix="serve-against-") as tmp, running_control_plane() as cp:
        paths: dict[str, Path | None] = {}
        for i, rev in enumerate(args.against):
            into = Path(tmp) / f"rev{i}"
            into.mkdir()
            paths[rev] = export(rev, into)
        paths["this tree"] = None
        kubeconfig, sysfs, claims, token = serve_cpu_world(bp, cp, Path(tmp), 64)

        def starter(path: Path | None) -> Callable[[Path], Any]:
            env = dict(os.environ) | bp.driver_env("cpu")
            if path is not None:
                env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(path), os.environ.get("PYTHONPATH"))))
            return lambda root: bp.start_topodra_serve(root, kubeconfig, sysfs, env, token)

        seen: dict[str, dict[str, list[float]]] = {side: {m: [] for m in MEASURES} for side in paths}
        loads: list[float] = []
        names = list(paths)
        with (
            bp.service_account_mount_point(True),
            bp.plugins({s: starter(p) for s, p in paths.items()}) as running,
        ):
            for side in names:  # not counted: first-call costs (imports, connections, caches)
                bp.kubelet_phase(client, running[side], claims, "latency", latency=len(claims), warmup=0)
                bp.kubelet_phase(client, running[side], claims, "rounds", rounds=3)
            for rep in range(args.reps):
                order = names[rep % len(names) :] + names[: rep % len(names)]
                for side in order:
                    plugin = running[side]
                    cpu = plugin.cpu_seconds()
                    got = bp.kubelet_phase(
                        client,
                        plugin,
                        claims * (LATENCY_CALLS // len(claims)),
                        "latency",
                        latency=LATENCY_CALLS,
                        warmup=0,
                    )
                    seen[side][MEASURES[0]].append((plugin.cpu_seconds() - cpu) / LATENCY_CALLS * 1000)
                    seen[side][MEASURES[1]].append(got["latency"]["p50_ms"])
                for side in order:
                    plugin = running[side]
                    cpu = plugin.cpu_seconds()
                    got = bp.kubelet_phase(client, plugin, claims, "rounds", rounds=ROUNDS)
                    seen[side][MEASURES[2]].append(
                        (plugin.cpu_seconds() - cpu) / (ROUNDS * len(claims)) * 1000
                    )
                    seen[side][MEASURES[3]].append(got["claims_per_s_rounds_median"])
                loads.append(os.getloadavg()[0])
                print(
                    f"rep {rep + 1} (load {loads[-1]:.2f}): "
                    + "; ".join(
                        f"{s}: " + " ".join(f"{seen[s][m][-1]:.3f}" for m in MEASURES) for s in names
                    ),
                    flush=True,
                )
    base = names[0]
    print(
        f"\nmedians of {args.reps}, ratio to {base}; load average (1 min) {min(loads):.2f}-{max(loads):.2f}"
    )
    for m in MEASURES:
        first = statistics.median(seen[base][m])
        row = "  ".join(
            f"{s} {statistics.median(seen[s][m]):.3f} ({statistics.median(seen[s][m]) / first:.3f}x)"
            for s in names
        )
        print(f"  {m}: {row}")


if __name__ == "__main__":
    main()
